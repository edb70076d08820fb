// The Codex CLI itself (`codex exec`, the version scripts/agents.ts pins), pointed at
// chatd as a custom Responses provider, on a model relayed to a scripted chat-completions
// upstream: the upstream asks for one shell command through Codex's exec tool, Codex runs it,
// sends its output back through chatd, and the upstream's answer ends the turn. Codex refuses a
// turn for any field, item or event it does not expect (a 400, a stream without
// response.completed: it retries, then exits 1), so exit code 0 here is the end-to-end check.
// Codex is not a dependency: `npm run test:agents-install` installs it (scripts/agents.ts); without
// it this test skips, saying so, except under CHATD_REQUIRE_SERVICES=1 (CI), where it fails
// (agentCommand, test/helpers/agents.ts).
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { agentDir, CODEX } from '../../scripts/agents.ts'
import { agentCommand } from '../helpers/agents.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { streamData } from '../helpers/sse-events.ts'
import { loopbackServer } from '../upstream/loopback.ts'
import { callThenAnswer, MODEL, relayThroughChatd, sentBodies, type Relay } from './harness.ts'

// One turn is two model calls on loopback and a shell command: seconds. The bound only keeps a
// Codex that retries (what it does with a broken stream) from holding the run.
const CODEX_TIMEOUT_MS = 120_000

interface CodexRun {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  /** The folder Codex worked in (its commands ran there). */
  work: string
  /** What `-o` wrote: the turn's last message. */
  lastMessage: string | undefined
}

interface Exchange {
  method: string
  path: string
  body: Record<string, any>
  /** chatd's reply as Codex read it (the SSE text of a stream). */
  reply: string
}

/**
 * A loopback proxy in front of chatd that keeps each request Codex makes and chatd's reply, so a
 * test can see what Codex sent back of what chatd gave it. `baseURL` is what Codex is given.
 */
async function recordingProxy (t: Test, relay: Relay): Promise<{ baseURL: string; exchanges: Exchange[] }> {
  const chatd = new URL(relay.baseURL).origin
  const exchanges: Exchange[] = []
  const proxy = await loopbackServer(t, async (req, res, recorded) => {
    const headers: Record<string, string> = {}
    for (const name of ['authorization', 'content-type', 'accept']) {
      const value = req.headers[name]
      if (typeof value === 'string') headers[name] = value
    }
    const answer = await fetch(chatd + recorded.path, { method: recorded.method, headers, body: recorded.body === '' ? undefined : recorded.body })
    res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' })
    let reply = ''
    const decoder = new TextDecoder()
    for await (const piece of answer.body ?? []) {
      reply += decoder.decode(piece, { stream: true })
      res.write(piece)
    }
    res.end()
    exchanges.push({ method: recorded.method, path: recorded.path, body: recorded.body === '' ? {} : JSON.parse(recorded.body), reply })
  })
  return { baseURL: `${proxy.url}${new URL(relay.baseURL).pathname}`, exchanges }
}

/**
 * Runs `codex exec PROMPT` with its own CODEX_HOME, whose config.toml names chatd as the
 * provider (as docs/api.md tells users to), in an empty folder outside any git repository (Codex
 * reads AGENTS.md files up to a repository's root). Asynchronous: chatd answers in this process.
 */
async function runCodex (t: Test, codex: string[], chatd: { baseURL: string; key: string }, prompt: string): Promise<CodexRun> {
  const dir = mkdtempSync(join(tmpdir(), 'chatd-codex-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const home = join(dir, 'home')
  const work = join(dir, 'work')
  mkdirSync(home)
  mkdirSync(work)
  writeFileSync(join(home, 'config.toml'), [
    `model = "${MODEL}"`,
    'model_provider = "chatd"',
    // Nothing but chatd is reachable from a test: no update check, no analytics.
    'check_for_update_on_startup = false',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[model_providers.chatd]',
    'name = "chatd"',
    `base_url = "${chatd.baseURL}"`,
    'env_key = "CHATD_API_KEY"',
    'wire_api = "responses"',
    '',
  ].join('\n'))
  const last = join(dir, 'last-message.txt')
  // The command is the test's own and runs in a throwaway folder; Linux sandboxes (bubblewrap)
  // are not available in every CI container, so approvals and the sandbox are off.
  const [program, ...launcher] = codex
  const args = [...launcher, 'exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '--ephemeral', '--color', 'never', '-C', work, '-o', last, prompt]
  const child = spawn(program!, args, {
    cwd: work,
    env: { ...process.env, CODEX_HOME: home, CHATD_API_KEY: chatd.key, NO_COLOR: '1' },
    // stdin closed: `codex exec` otherwise waits to read more of the prompt from it.
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => { stdout += text })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text })
  const timer = setTimeout(() => child.kill('SIGKILL'), CODEX_TIMEOUT_MS)
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (exitCode, exitSignal) => resolve([exitCode, exitSignal]))
  }).finally(() => clearTimeout(timer))
  return { code, signal, stdout, stderr, work, lastMessage: existsSync(last) ? readFileSync(last, 'utf8') : undefined }
}

/** The run's output, for a failure message. */
function shown (run: CodexRun): string {
  return `exit ${run.code ?? run.signal}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-4000)}`
}

t.test('CI installs the pinned agents before the tests, so the agent tests run there rather than skipping', async t => {
  const ci = readFileSync(join(REPO_ROOT, '.ci/run'), 'utf8')
  const install = ci.indexOf('\nnpm run test:agents-install\n')
  t.ok(ci.indexOf('\nexport CHATD_REQUIRE_SERVICES=1\n') > 0, 'a missing agent fails in CI')
  t.ok(install > ci.indexOf('npm@10 ci') && install < ci.indexOf('\nnpm test\n'), 'installed after npm ci, before npm test')
  t.equal(JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).scripts['test:agents-install'], 'node scripts/agents.ts')
})

t.test('installing again, once the pinned Codex is there, does nothing and says so', async t => {
  if (!agentCommand(t, CODEX)) return
  // No npm on the PATH: nothing may reach the registry on this path.
  const again = spawnSync(process.execPath, [join(REPO_ROOT, 'scripts/agents.ts'), 'codex'], { encoding: 'utf8', env: { ...process.env, PATH: '' }, timeout: 30_000 })
  t.equal(again.status, 0, again.stderr)
  t.match(again.stdout, `${CODEX.package}@${CODEX.version} is installed in ${agentDir(CODEX)}\n`)
})

const COMMAND = 'echo chatd-ok | tee out.txt'
const FINAL = 'Wrote chatd-ok to out.txt.'

t.test('codex exec: the upstream asks for a command, Codex runs it, its output goes back through chatd, the answer ends the turn', async t => {
  const codex = agentCommand(t, CODEX)
  if (!codex) return
  const relay = await relayThroughChatd(t, callThenAnswer({ tool: 'exec_command', calls: [JSON.stringify({ cmd: COMMAND })], answer: FINAL }))
  const proxy = await recordingProxy(t, relay)
  const run = await runCodex(t, codex, { baseURL: proxy.baseURL, key: relay.key }, 'Write chatd-ok to out.txt.')

  t.equal(run.code, 0, 'codex exec exits 0', { codex: shown(run) })
  t.match(run.stdout, FINAL, 'the answer is what codex exec prints')
  t.equal(run.lastMessage?.trim(), FINAL, 'and the turn\'s last message')
  t.equal(existsSync(join(run.work, 'out.txt')) ? readFileSync(join(run.work, 'out.txt'), 'utf8') : undefined, 'chatd-ok\n', 'the command ran, in Codex\'s working folder')

  t.same(proxy.exchanges.map(e => `${e.method} ${e.path}`), ['POST /api/v1/responses', 'POST /api/v1/responses'], 'Codex asks chatd for nothing else, and retried nothing')
  const [turn1, turn2] = proxy.exchanges
  t.match(turn1.body, { stream: true, store: false, tools: [{ type: 'function', name: 'exec_command' }] }, 'Codex\'s own request, as sent')
  t.ok(streamData(turn1.reply).some(e => e.type === 'response.output_item.done' && e.item.type === 'function_call' && e.item.name === 'exec_command'), 'chatd streamed the call as an item Codex runs')
  t.match(turn2.body.input.filter((item: { type?: string }) => item.type === 'function_call' || item.type === 'function_call_output'), [
    { type: 'function_call', name: 'exec_command', arguments: JSON.stringify({ cmd: COMMAND }) },
    { type: 'function_call_output', output: /chatd-ok/ },
  ], 'the next request carries the call and the command\'s output')

  const bodies = sentBodies(relay.upstream)
  t.equal(bodies.length, 2, 'one upstream call per model turn')
  const [first, second] = bodies
  t.ok(first.tools?.some((tool: { function?: { name?: string } }) => tool.function?.name === 'exec_command'), 'Codex\'s exec tool is offered to the model')
  t.match(JSON.stringify(first.messages), 'You are a coding agent running in the Codex CLI', 'with Codex\'s instructions')
  t.match(JSON.stringify(first.messages.at(-1)), 'Write chatd-ok to out.txt.', 'the prompt is the last message')
  t.match(second.messages.find((m: { role: string }) => m.role === 'assistant'), { tool_calls: [{ id: 'call_up1', function: { name: 'exec_command', arguments: JSON.stringify({ cmd: COMMAND }) } }] }, 'the call goes back as the model made it')
  const result = second.messages.find((m: { role: string }) => m.role === 'tool')
  t.match(result, { tool_call_id: 'call_up1' }, 'the command\'s result answers that call')
  t.match(JSON.stringify(result?.content), 'chatd-ok', 'and carries the command\'s output')
})

t.test('codex exec with a model that thinks first: the reasoning item chatd streams comes back on the next request and is accepted', async t => {
  const codex = agentCommand(t, CODEX)
  if (!codex) return
  const thinking = 'The user wants a file; one command writes it.'
  const relay = await relayThroughChatd(t, callThenAnswer({ tool: 'exec_command', calls: [JSON.stringify({ cmd: COMMAND })], answer: FINAL, reasoning: thinking }), { reasoning: 'separate' })
  const proxy = await recordingProxy(t, relay)
  const run = await runCodex(t, codex, { baseURL: proxy.baseURL, key: relay.key }, 'Write chatd-ok to out.txt.')

  t.equal(run.code, 0, 'codex exec exits 0', { codex: shown(run) })
  t.equal(run.lastMessage?.trim(), FINAL)
  t.match(run.stdout + run.stderr, thinking, 'Codex shows the thinking as the reasoning summary')
  t.equal(proxy.exchanges.length, 2, 'Codex retried nothing')
  t.equal(sentBodies(relay.upstream).length, 2)

  const streamed = streamData(proxy.exchanges[0]?.reply ?? '').find(e => e.type === 'response.output_item.done' && e.item.type === 'reasoning')?.item
  t.match(streamed, { type: 'reasoning', summary: [{ type: 'summary_text', text: thinking }], encrypted_content: /\S{16}/ }, 'chatd streamed the thinking as a reasoning item, sealed as Codex asked (include reasoning.encrypted_content)')
  const sentBack = proxy.exchanges[1]?.body.input.find((item: { type?: string }) => item.type === 'reasoning')
  t.match(sentBack, { type: 'reasoning', encrypted_content: streamed?.encrypted_content }, 'Codex sent the sealed value back as it got it, and chatd accepted the turn')
})
