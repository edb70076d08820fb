// The set-up the new-key page shows, filled in with this server's address, a
// ready model and the new key: curl, the openai package for Node, Codex's
// config.toml and Claude Code's variables. Plain text: the template escapes
// each snippet whole. Every value is quoted for the language it lands in, so a
// model id with a quote in it still pastes as one word.

import type { SetupModel } from './setup-model.ts'

export interface Snippet {
  /** The element id the copy button names. */
  id: string
  title: string
  /** Where it goes, in one line. */
  note: string
  text: string
}

/** What Claude Code may ask for per reply: the most docs/api.md advises, and at most an eighth of the window, so the prompt has room. */
const CLAUDE_CODE_OUTPUT_TOKENS = 4096

/**
 * What each agent's first turn needs in the context window, before the
 * conversation (docs/api.md measured both: Codex's instructions are about
 * 7,900 tokens, Claude Code's system prompt and tools about 12,000).
 */
const AGENT_PROMPT_TOKENS = { codex: 8_000, claudeCode: 12_000 }

/** Said under an agent's snippet when the model's window cannot hold the agent's prompt. */
function tooSmall (window: number | undefined, agent: string, promptTokens: number): string {
  return window !== undefined && window < promptTokens
    ? ` This model's window (${window} tokens) cannot hold ${agent}'s prompt (about ${promptTokens.toLocaleString('en-US')} tokens): use a larger model for it.`
    : ''
}

/** A word the shell reads as itself: bare when that is safe, else single-quoted. */
export function shellWord (value: string): string {
  return /^[A-Za-z0-9._:/@%+=,-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`
}

/** A TOML basic string (JSON's escapes are TOML's; TOML also forbids a raw DEL). */
function tomlString (value: string): string {
  return JSON.stringify(value).replaceAll('\x7f', '\\u007f')
}

/** A JavaScript string literal. */
const jsString = (value: string): string => JSON.stringify(value)

/** curl, with -g when the address is an IPv6 one: curl would read its brackets as a URL pattern. */
function curl (url: string): string {
  return `curl ${url.includes('[') ? '-g ' : ''}${shellWord(url)}`
}

/** For when no model is ready: the list of models, to see when one is and which id to use. */
export function modelsSnippet ({ url, key }: { url: string; key: string }): Snippet {
  return {
    id: 'setup-models-curl',
    title: 'curl: the models and their state',
    note: 'A model is ready when it is listed with "status": "ready"; use its id as the model.',
    text: `${curl(`${url}/api/v1/models`)} -H ${shellWord(`Authorization: Bearer ${key}`)}`,
  }
}

export function setupSnippets ({ url, key, model }: { url: string; key: string; model: SetupModel }): Snippet[] {
  const body = JSON.stringify({ model: model.id, messages: [{ role: 'user', content: 'Hello' }] })
  const window = model.contextLength
  return [
    {
      id: 'setup-curl',
      title: 'curl',
      note: 'A chat completion from the command line.',
      text: [
        `${curl(`${url}/api/v1/chat/completions`)} \\`,
        `  -H ${shellWord(`Authorization: Bearer ${key}`)} \\`,
        '  -H \'Content-Type: application/json\' \\',
        `  -d ${shellWord(body)}`,
      ].join('\n'),
    },
    {
      id: 'setup-node',
      title: 'Node: the openai package',
      note: 'npm install openai, save this as hello.mjs, run node hello.mjs.',
      text: [
        "import OpenAI from 'openai'",
        '',
        'const client = new OpenAI({',
        `  baseURL: ${jsString(`${url}/api/v1`)},`,
        `  apiKey: ${jsString(key)}, // or process.env.CHATD_API_KEY`,
        '})',
        'const completion = await client.chat.completions.create({',
        `  model: ${jsString(model.id)},`,
        "  messages: [{ role: 'user', content: 'Hello' }],",
        '})',
        'console.log(completion.choices[0].message.content)',
      ].join('\n'),
    },
    {
      id: 'setup-codex',
      title: 'Codex: ~/.codex/config.toml',
      note: `chatd as a custom provider; Codex reads the key from CHATD_API_KEY (below).${tooSmall(window, 'Codex', AGENT_PROMPT_TOKENS.codex)}`,
      text: [
        `model = ${tomlString(model.id)}`,
        'model_provider = "chatd"',
        '',
        '[model_providers.chatd]',
        'name = "chatd"',
        `base_url = ${tomlString(`${url}/api/v1`)}`,
        'env_key = "CHATD_API_KEY"',
        'wire_api = "responses"',
      ].join('\n'),
    },
    {
      id: 'setup-codex-key',
      title: 'Codex: the key',
      note: 'In the shell that runs codex.',
      text: `export CHATD_API_KEY=${shellWord(key)}`,
    },
    {
      id: 'setup-claude-code',
      title: 'Claude Code',
      note: `In the shell that runs claude. It takes a model it does not know for a 1M-token window: the context line gives the real one.${tooSmall(window, 'Claude Code', AGENT_PROMPT_TOKENS.claudeCode)}`,
      text: [
        `export ANTHROPIC_BASE_URL=${shellWord(`${url}/api`)}`,
        `export ANTHROPIC_API_KEY=${shellWord(key)}`,
        `export ANTHROPIC_MODEL=${shellWord(model.id)}`,
        `export ANTHROPIC_SMALL_FAST_MODEL=${shellWord(model.id)}`,
        window === undefined
          ? '# CLAUDE_CODE_MAX_CONTEXT_TOKENS: this model\'s context window is not known to chatd; set it to the window'
          : `export CLAUDE_CODE_MAX_CONTEXT_TOKENS=${window}`,
        `export CLAUDE_CODE_MAX_OUTPUT_TOKENS=${window === undefined ? CLAUDE_CODE_OUTPUT_TOKENS : Math.max(1, Math.min(CLAUDE_CODE_OUTPUT_TOKENS, Math.floor(window / 8)))}`,
        'export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1',
      ].join('\n'),
    },
  ]
}
