// The set-up the new-key page shows, filled in with this server's address, the
// models that can serve each client and the new key: curl, the openai package
// for Node, the OpenAI Agents SDK, Codex's config.toml and Claude Code's
// variables. Every number it fills in fits the key's tier and the model's
// window, so the first turn is not refused. Plain text: the template escapes
// each snippet whole. Every value is quoted for the language it lands in, so a
// model id with a quote in it still pastes as one word.

import type { Tier } from '../accounts/tiers.ts'
import type { AgentModel, SetupModel } from './setup-model.ts'

export interface Snippet {
  /** The element id the copy button names. */
  id: string
  title: string
  /** Where it goes, in one line. */
  note: string
  text: string
}

/** The tier's bounds a snippet's numbers must fit. */
export type SetupTier = Pick<Tier, 'name' | 'maxTokensPerRequest' | 'tokensPerMinute'>

/** The most Claude Code is told to ask for per reply, whatever else allows more (docs/agents.md). */
export const CLAUDE_CODE_OUTPUT_TOKENS = 4096

/**
 * What each agent's first turn needs in the context window, before the
 * conversation (docs/agents.md measured both: Codex's instructions are about
 * 7,900 tokens, Claude Code's system prompt and tools about 11,200 to 12,000).
 */
export const AGENT_PROMPT_TOKENS = { codex: 8_000, claudeCode: 12_000 }

const count = (n: number): string => n.toLocaleString('en-US')

/**
 * CLAUDE_CODE_MAX_OUTPUT_TOKENS, the max_tokens of every Claude Code request: the least of 4,096;
 * an eighth of the window (the rest is the prompt's, so Claude Code does not compact every turn);
 * the tier's max_tokens_per_request (a larger max_tokens is a 400); and what the tier's
 * tokens_per_minute leaves after Claude Code's prompt (a turn that reserves more is a 400). At
 * least 1.
 */
export function claudeCodeOutputTokens (window: number | undefined, tier: SetupTier): number {
  const bounds = [CLAUDE_CODE_OUTPUT_TOKENS]
  if (window !== undefined) bounds.push(Math.floor(window / 8))
  if (tier.maxTokensPerRequest !== null) bounds.push(tier.maxTokensPerRequest)
  if (tier.tokensPerMinute !== null) bounds.push(tier.tokensPerMinute - AGENT_PROMPT_TOKENS.claudeCode)
  return Math.max(1, Math.min(...bounds))
}

/** Said under an agent's snippet: which model it names, and why that one (or that none can). */
function agentNote (agent: string, promptTokens: number, choice: AgentModel | undefined, fallback: SetupModel): string {
  const need = `${agent}'s prompt (about ${count(promptTokens)} tokens)`
  if (choice === undefined) {
    const window = fallback.contextLength === undefined ? '' : ` (${fallback.contextLength} tokens)`
    return ` No model on this server has a window that holds ${need}: ${fallback.id}'s${window} does not, so this will fail. Ask the server's operator for a model with a window of at least ${count(promptTokens)} tokens (an upstream model, for example).`
  }
  const window = choice.model.contextLength === undefined ? 'its window is not known to chatd' : `its window is ${count(choice.model.contextLength)} tokens`
  if (!choice.ready) {
    return ` No ready model holds ${need}; ${choice.model.id} can (${window}) once it is ready (now: ${choice.status}): ask the server's operator.`
  }
  return ` It names ${choice.model.id}, the first ready model that holds ${need} (${window}).`
}

/** The tokens-per-minute line of an agent's note, when the tier's minute cannot hold one turn. */
function minuteNote (agent: string, promptTokens: number, tier: SetupTier): string {
  return tier.tokensPerMinute !== null && tier.tokensPerMinute <= promptTokens
    ? ` Your tier (${tier.name}) allows ${count(tier.tokensPerMinute)} tokens a minute, less than one ${agent} turn's prompt: its turns will be refused.`
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

export function setupSnippets ({ url, key, model, agents, tier }: {
  url: string
  key: string
  /** For curl, Node and the Agents SDK: the model chooseSetupModel picked. */
  model: SetupModel
  /** Each agent's model (chooseAgentModel); undefined: none can hold its prompt, and `model` is named with a warning. */
  agents: { codex?: AgentModel; claudeCode?: AgentModel }
  tier: SetupTier
}): Snippet[] {
  const body = JSON.stringify({ model: model.id, messages: [{ role: 'user', content: 'Hello' }] })
  const codex = agents.codex?.model ?? model
  const claude = agents.claudeCode?.model ?? model
  const claudeWindow = claude.contextLength
  const outputTokens = claudeCodeOutputTokens(claudeWindow, tier)
  const bounds = [
    `${count(CLAUDE_CODE_OUTPUT_TOKENS)}`,
    ...(claudeWindow !== undefined ? ['an eighth of the window'] : []),
    ...(tier.maxTokensPerRequest !== null ? [`your tier's ${count(tier.maxTokensPerRequest)} tokens per request`] : []),
    ...(tier.tokensPerMinute !== null ? [`what its ${count(tier.tokensPerMinute)} tokens a minute leave after the prompt`] : []),
  ]
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
      id: 'setup-agents-sdk',
      title: 'Node: the OpenAI Agents SDK',
      note: 'npm install openai @openai/agents, save this as agent.mjs, run node agent.mjs. It speaks the Responses API.',
      text: [
        "import OpenAI from 'openai'",
        "import { Agent, run, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents'",
        '',
        "setTracingDisabled(true) // else it sends its traces to OpenAI's platform when OPENAI_API_KEY is set",
        'setDefaultOpenAIClient(new OpenAI({',
        `  baseURL: ${jsString(`${url}/api/v1`)},`,
        `  apiKey: ${jsString(key)}, // or process.env.CHATD_API_KEY`,
        '}))',
        `const agent = new Agent({ name: 'helper', model: ${jsString(model.id)}, instructions: 'Be brief.' })`,
        "console.log((await run(agent, 'Hello')).finalOutput)",
      ].join('\n'),
    },
    {
      id: 'setup-codex',
      title: 'Codex: ~/.codex/config.toml',
      note: `chatd as a custom provider; Codex reads the key from CHATD_API_KEY (below).${agentNote('Codex', AGENT_PROMPT_TOKENS.codex, agents.codex, model)}${minuteNote('Codex', AGENT_PROMPT_TOKENS.codex, tier)}`,
      text: [
        `model = ${tomlString(codex.id)}`,
        'model_provider = "chatd"',
        ...(codex.contextLength !== undefined ? [`model_context_window = ${codex.contextLength}`] : ['# model_context_window: this model\'s window is not known to chatd; set it to the window']),
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
      note: `In the shell that runs claude. It takes a model it does not know for a 1M-token window: the context line gives the real one. The output line is the least of ${bounds.join(', ')}.${agentNote('Claude Code', AGENT_PROMPT_TOKENS.claudeCode, agents.claudeCode, model)}${minuteNote('Claude Code', AGENT_PROMPT_TOKENS.claudeCode, tier)}`,
      text: [
        `export ANTHROPIC_BASE_URL=${shellWord(`${url}/api`)}`,
        `export ANTHROPIC_API_KEY=${shellWord(key)}`,
        `export ANTHROPIC_MODEL=${shellWord(claude.id)}`,
        `export ANTHROPIC_SMALL_FAST_MODEL=${shellWord(claude.id)}`,
        claudeWindow === undefined
          ? '# CLAUDE_CODE_MAX_CONTEXT_TOKENS: this model\'s context window is not known to chatd; set it to the window'
          : `export CLAUDE_CODE_MAX_CONTEXT_TOKENS=${claudeWindow}`,
        `export CLAUDE_CODE_MAX_OUTPUT_TOKENS=${outputTokens}`,
        'export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1',
      ].join('\n'),
    },
  ]
}
