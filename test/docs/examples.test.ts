// The examples a user pastes from the README and docs/ (curl lines, the openai, Anthropic and
// Agents SDK snippets, Codex's config and the agents' variables) run as written against a chatd
// listening on loopback: the block is taken from the markdown by a line it holds, only the
// server's address and the `sk-chatd-…` placeholder are replaced, and it runs in bash or node
// with CHATD_API_KEY set, as the docs tell users to. Each check fails when the block is gone or
// no longer works. The models the docs name (deepseek-r1-distill-qwen-1.5b, upstream) are served
// by a scripted upstream that calls get_weather when offered it and answers otherwise, so tool
// examples get their call. Codex and Claude Code themselves run when installed
// (npm run test:agents-install), as in their own tests. The install lines are not run here (they
// download the agents): they were run once by hand, into a temporary --prefix.
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { CLAUDE_CODE, CODEX } from '../../scripts/agents.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import { agentCommand } from '../helpers/agents.ts'
import { buildTestApp } from '../helpers/app.ts'
import { chunk, loopbackServer, sseData, sseHead } from '../upstream/loopback.ts'

const run = promisify(execFile)
const ROOT = new URL('../..', import.meta.url).pathname
const ANSWER = 'Hello from chatd.'
const USAGE = { prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 }

/** The fenced block of `file` that holds `marker`, its fence's indentation removed. */
function block (file: string, marker: string): { lang: string; text: string } {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n')
  let open: { lang: string; indent: number; body: string[] } | undefined
  for (const line of lines) {
    const fence = /^(\s*)```(\w*)\s*$/.exec(line)
    if (fence && open === undefined) {
      open = { lang: fence[2], indent: fence[1].length, body: [] }
    } else if (fence && open !== undefined) {
      const text = open.body.join('\n')
      if (text.includes(marker)) return { lang: open.lang, text }
      open = undefined
    } else if (open !== undefined) {
      open.body.push(line.slice(Math.min(open.indent, /^\s*/.exec(line)![0].length)))
    }
  }
  throw new Error(`${file} has no code block holding ${JSON.stringify(marker)}`)
}

/** The scripted upstream: get_weather's call when the request offers it and carries no result yet, else ANSWER. */
function upstreamReply (body: { messages: Array<{ role: string }>; tools?: Array<{ function: { name: string } }> }, res: import('node:http').ServerResponse): void {
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: '' }))
  const offered = (body.tools ?? []).some(tool => tool.function.name === 'get_weather')
  if (offered && !body.messages.some(m => m.role === 'tool')) {
    sseData(res, chunk({ tool_calls: [{ index: 0, id: 'call_up1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }))
    sseData(res, chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":"Oslo"}' } }] }))
    sseData(res, chunk({}, 'tool_calls'))
  } else {
    sseData(res, chunk({ content: ANSWER }))
    sseData(res, chunk({}, 'stop'))
  }
  sseData(res, { id: 'chatcmpl-upstream', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: USAGE })
  sseData(res, '[DONE]')
  res.end()
}

async function docsServer (t: Test) {
  const upstream = await loopbackServer(t, (_req, res, recorded) => upstreamReply(JSON.parse(recorded.body), res))
  const backends = [
    new UpstreamBackend({ id: 'deepseek-r1-distill-qwen-1.5b', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm', contextLength: 16384 }),
    new UpstreamBackend({ id: 'upstream', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm', contextLength: 131072 }),
  ]
  t.teardown(() => Promise.all(backends.map(b => b.close())))
  const built = await buildTestApp(t, { backends })
  await built.app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`
  // An account on the shipped free tier (2,048 tokens a request, 20,000 a minute), as everyone who registers at /api.
  const free = await built.accounts.create({ email: 'free@example.com', tier: 'free' })
  const freeKey = (await built.accounts.createKey(free.id)).key
  return { ...built, origin, freeKey }
}

/** The block as a user pastes it here: this server's address for the docs' ones, `key` for the placeholder. */
function pasted (text: string, origin: string, key: string): string {
  return text
    .replaceAll('http://chatd.example.com', origin)
    .replaceAll('http://127.0.0.1:8080', origin)
    .replaceAll('http://localhost:8080', origin)
    .replaceAll('localhost:8080', origin.replace('http://', ''))
    .replaceAll('sk-chatd-…', key)
}

/** The JSON a block's first curl printed, before the next one's event stream (curl -s adds no newline). */
function beforeStream (stdout: string): unknown {
  return JSON.parse(stdout.slice(0, stdout.indexOf('event: ')))
}

/** The JSON a block's last curl printed, after the event stream before it. */
function lastLine (stdout: string): unknown {
  return JSON.parse(stdout.slice(stdout.lastIndexOf('\n') + 1))
}

interface Ran { stdout: string; stderr: string; code: number }

async function runIn (program: string, args: string[], env: Record<string, string>, cwd: string): Promise<Ran> {
  try {
    const { stdout, stderr } = await run(program, args, { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: cwd, ...env }, cwd, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 })
    return { stdout, stderr, code: 0 }
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; code?: number }
    return { stdout: e.stdout ?? '', stderr: e.stderr ?? '', code: typeof e.code === 'number' ? e.code : -1 }
  }
}

t.test('the README\'s and the API reference\'s examples run as written', async t => {
  const { origin, key, freeKey } = await docsServer(t)
  const dir = t.testdir()
  const sh = async (file: string, marker: string, as = key): Promise<Ran> => {
    const { lang, text } = block(file, marker)
    t.equal(lang, 'sh', `${file}: the block with ${marker} is shell`)
    return runIn('bash', ['-euo', 'pipefail', '-c', pasted(text, origin, as)], { CHATD_API_KEY: as }, dir)
  }
  const node = async (file: string, marker: string, name: string): Promise<Ran> => {
    const { lang, text } = block(file, marker)
    t.equal(lang, 'js', `${file}: the block with ${marker} is JavaScript`)
    writeFileSync(join(dir, name), pasted(text, origin, key))
    return runIn(process.execPath, [join(dir, name)], { CHATD_API_KEY: key }, dir)
  }
  const ok = (ran: Ran, what: string): void => { t.equal(ran.code, 0, `${what} exits 0${ran.code === 0 ? '' : `: ${ran.stderr.slice(-800)} ${ran.stdout.slice(-400)}`}`) }

  // README: the first authenticated call, a completion, the openai client.
  let ran = await sh('README.md', 'export CHATD_API_KEY=sk-chatd-…')
  ok(ran, 'README: the models list')
  t.match(JSON.parse(ran.stdout), { object: 'list', data: [{ id: 'deepseek-r1-distill-qwen-1.5b', status: 'ready' }, { id: 'upstream' }] })
  ran = await sh('README.md', 'What is 17 * 23?')
  ok(ran, 'README: curl')
  t.match(JSON.parse(ran.stdout), { object: 'chat.completion', choices: [{ message: { content: ANSWER } }] })
  ran = await node('README.md', "content: 'What is 17 * 23?'", 'readme.mjs')
  ok(ran, 'README: the openai client')
  t.equal(ran.stdout.trim(), ANSWER)

  // docs/api.md: chat completions.
  ran = await sh('docs/api.md', '# one reply\ncurl -s http://127.0.0.1:8080/api/v1/chat/completions')
  ok(ran, 'api.md: chat curl')
  t.match(ran.stdout, /"object":"chat\.completion"[\s\S]*data: \{[\s\S]*"usage"[\s\S]*data: \[DONE\]/, 'one reply, then the stream with its usage')
  ran = await node('docs/api.md', 'for await (const chunk of stream) process.stdout.write', 'chat.mjs')
  ok(ran, 'api.md: chat with the openai client')
  t.match(ran.stdout, `${ANSWER} {`)
  ran = await sh('docs/api.md', '"response_format": {"type": "json_schema", "json_schema": {"name": "pet"')
  ok(ran, 'api.md: structured output curl')
  t.match(JSON.parse(ran.stdout), { object: 'chat.completion' })

  // The Responses API: plain, streamed, a tool call; the openai client sending the result back.
  ran = await sh('docs/api.md', '# one reply: the response object above')
  ok(ran, 'api.md: Responses curl')
  t.match(beforeStream(ran.stdout), { object: 'response', status: 'completed', output: [{ type: 'message', content: [{ type: 'output_text', text: ANSWER }] }] })
  t.match(ran.stdout, /event: response\.created[\s\S]*event: response\.output_text\.delta[\s\S]*event: response\.completed/, 'the typed events')
  t.match(lastLine(ran.stdout), { object: 'response', output: [{ type: 'function_call', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' }] }, 'the tool call\'s item')
  ran = await node('docs/api.md', "type: 'function_call_output', call_id: call.call_id", 'responses.mjs')
  ok(ran, 'api.md: Responses with the openai client')
  t.equal(ran.stdout.trim(), `get_weather {"city":"Oslo"} ${ANSWER}`)

  // The Agents SDK, both ways.
  ran = await node('docs/api.md', 'setDefaultOpenAIClient(new OpenAI({ baseURL:', 'agents-default.mjs')
  ok(ran, 'api.md: the Agents SDK with the default client')
  t.equal(ran.stdout.trim(), ANSWER)
  ran = await node('docs/api.md', 'const runner = new Runner({', 'agents-runner.mjs')
  ok(ran, 'api.md: the Agents SDK with a Runner of its own')
  t.equal(ran.stdout.trim(), ANSWER)

  // The Messages API: plain, streamed, a tool call; Anthropic's SDK.
  ran = await sh('docs/api.md', '# one reply: the message above')
  ok(ran, 'api.md: Messages curl')
  t.match(beforeStream(ran.stdout), { type: 'message', content: [{ type: 'text', text: ANSWER }], stop_reason: 'end_turn' })
  t.match(ran.stdout, /event: message_start[\s\S]*"text_delta"[\s\S]*event: message_stop/)
  t.match(lastLine(ran.stdout), { type: 'message', content: [{ type: 'tool_use', id: /^toolu_/, name: 'get_weather', input: { city: 'Oslo' } }], stop_reason: 'tool_use' }, 'the tool call\'s block')
  ran = await node('docs/api.md', "import Anthropic from '@anthropic-ai/sdk'", 'anthropic.mjs')
  ok(ran, 'api.md: Anthropic\'s SDK')
  t.equal(ran.stdout, `get_weather { city: 'Oslo' } ${ANSWER}\n${ANSWER}`)

  // Claude Code's variables, on the free tier: the request it makes with them is within the tier.
  const claude = block('docs/api.md', 'export CLAUDE_CODE_MAX_OUTPUT_TOKENS=').text
  ran = await runIn('bash', ['-c', `${pasted(claude.replace(/\nclaude$/, ''), origin, freeKey)}\n${claudeCodeRequest}`], {}, dir)
  ok(ran, 'api.md: Claude Code\'s variables')
  t.match(JSON.parse(ran.stdout), { type: 'message', content: [{ type: 'text', text: ANSWER }] }, 'its max_tokens fits the free tier')

  // docs/accounts-and-limits.md: the usage.
  ran = await sh('docs/accounts-and-limits.md', '/api/v1/usage -H')
  ok(ran, 'accounts-and-limits.md: usage')
  t.match(JSON.parse(ran.stdout), { object: 'usage' })
})

/** What Claude Code sends with its variables: POST $ANTHROPIC_BASE_URL/v1/messages, the key as x-api-key, max_tokens CLAUDE_CODE_MAX_OUTPUT_TOKENS. */
const claudeCodeRequest = 'curl -s "$ANTHROPIC_BASE_URL/v1/messages?beta=true" -H "x-api-key: $ANTHROPIC_API_KEY" -H \'anthropic-version: 2023-06-01\' -H \'Content-Type: application/json\' ' +
  '-d "{\\"model\\":\\"$ANTHROPIC_MODEL\\",\\"max_tokens\\":$CLAUDE_CODE_MAX_OUTPUT_TOKENS,\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"Hi\\"}]}"'

t.test('docs/agents.md: the model check, the Agents SDK, Codex\'s config and Claude Code\'s variables run as written (and api.md\'s Codex set-up)', async t => {
  const { origin, key, freeKey } = await docsServer(t)
  const dir = t.testdir()
  const env = { CHATD_API_KEY: key }

  const check = block('docs/agents.md', 'export CHATD_API_KEY=sk-chatd-…')
  let ran = await runIn('bash', ['-euo', 'pipefail', '-c', pasted(check.text, origin, key)], env, dir)
  t.equal(ran.code, 0, ran.stderr)
  const listed = JSON.parse(ran.stdout).data as Array<Record<string, unknown>>
  t.match(listed, [{ id: 'deepseek-r1-distill-qwen-1.5b', status: 'ready', context_length: 16384, allowed: true }, { id: 'upstream', status: 'ready', context_length: 131072 }], 'the list the page reads: status and context_length')

  writeFileSync(join(dir, 'agent.mjs'), pasted(block('docs/agents.md', "import { Agent, run, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents'").text, origin, key))
  ran = await runIn(process.execPath, [join(dir, 'agent.mjs')], env, dir)
  t.equal(ran.code, 0, ran.stderr)
  t.equal(ran.stdout.trim(), ANSWER, 'the Agents SDK snippet prints the final output')

  const claude = block('docs/agents.md', 'export CLAUDE_CODE_MAX_OUTPUT_TOKENS=')
  t.match(claude.text, /\nclaude$/, 'the block ends by starting claude')
  const variables = claude.text.replace(/\nclaude$/, '')
  ran = await runIn('bash', ['-c', `${pasted(variables, origin, freeKey)}\n${claudeCodeRequest}`], { CHATD_API_KEY: freeKey }, dir)
  t.match(JSON.parse(ran.stdout), { type: 'message', model: 'upstream', content: [{ type: 'text', text: ANSWER }] }, 'the request Claude Code makes with these variables fits the free tier')
  ran = await runIn('bash', ['-c', `${pasted(variables, origin, freeKey)}\nprintf '%s\\n' "$CLAUDE_CODE_MAX_CONTEXT_TOKENS"`], { CHATD_API_KEY: freeKey }, dir)
  t.equal(Number(ran.stdout.trim()), listed[1].context_length, 'the window it gives is the model\'s context_length')

  // Skipped, saying how to install it, when Claude Code is not installed; a failure in CI.
  const claudeCode = agentCommand(t, CLAUDE_CODE, 'claude -p itself')
  if (claudeCode) {
    // The block as written, with claude -p for the interactive claude (the pinned binary).
    const home = mkdtempSync(join(tmpdir(), 'chatd-docs-claude-'))
    t.teardown(() => rmSync(home, { recursive: true, force: true }))
    ran = await runIn('bash', ['-c', `${pasted(variables, origin, key)}\nexec "$0" -p 'Say hello.' < /dev/null`, claudeCode[0]!], { CHATD_API_KEY: key }, home)
    t.equal(ran.code, 0, `claude -p with the documented variables exits 0: ${ran.stderr.slice(-500)}`)
    t.match(ran.stdout, ANSWER)
  }

  await codexAsDocumented(t, 'docs/agents.md', origin, key)
  await codexAsDocumented(t, 'docs/api.md', origin, key)
})

/**
 * A file's Codex config.toml and `codex exec` line, as written: the config in a CODEX_HOME of its
 * own, the line run by bash in a git repository with `codex` the pinned, installed CLI. Without
 * Codex installed only the config is checked (and, under CHATD_REQUIRE_SERVICES=1, that fails).
 */
async function codexAsDocumented (t: Test, file: string, origin: string, key: string): Promise<void> {
  const toml = block(file, 'model_provider = "chatd"')
  t.equal(toml.lang, 'toml', `${file}: Codex's config`)
  const config = pasted(toml.text, origin, key)
  t.match(config, `base_url = "${origin}/api/v1"`)
  t.match(config, 'env_key = "CHATD_API_KEY"')
  const exec = block(file, 'codex exec "')
  t.match(exec.text, /< \/dev\/null$/, `${file}: codex exec's stdin is /dev/null`)
  const codex = agentCommand(t, CODEX, `${file}: codex exec itself`)
  if (!codex) return
  const work = mkdtempSync(join(tmpdir(), 'chatd-docs-codex-'))
  t.teardown(() => rmSync(work, { recursive: true, force: true }))
  await run('git', ['init', '-q', work])
  // Nothing but chatd is reachable from a test: no update check, no analytics.
  writeFileSync(join(work, 'config.toml'), `check_for_update_on_startup = false\n${config}\n\n[analytics]\nenabled = false\n`)
  const codexFunction = `codex () { ${codex.map(part => `'${part}'`).join(' ')} "$@"; }`
  const ran = await runIn('bash', ['-c', `${codexFunction}\n${pasted(exec.text, origin, key)}`], { CHATD_API_KEY: key, CODEX_HOME: work }, work)
  t.equal(ran.code, 0, `${file}: codex exec as documented exits 0: ${ran.stderr.slice(-800)}`)
  t.match(ran.stdout, ANSWER)
}
