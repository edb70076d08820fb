// A model that will not come back without the operator (its files missing, its download or load
// failed) is answered 400 model_out_of_service on every door, so that clients stop at once: the
// openai and Anthropic SDKs with their default retries, the Codex CLI and Claude Code themselves
// (the pinned versions of scripts/agents.ts; agentCommand skips them when not installed, as in
// their own tests, and fails them under CHATD_REQUIRE_SERVICES=1).
// Answered 503, Claude Code retried for three minutes and Codex for half of one before showing the
// reason (issue 37). A model still loading keeps 503 with Retry-After: it comes back by itself.
// Requests are counted on chatd's own /metrics, so "at once" is a count, not a time.
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import t, { type Test } from 'tap'
import { CLAUDE_CODE, CODEX } from '../../scripts/agents.ts'
import { UnavailableBackend } from '../../src/engine/registry.ts'
import { agentCommand } from '../helpers/agents.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const BROKEN = 'broken'
/** What every key holder reads of the model's state (its reason for the operator names the command). */
const SUMMARY = 'its files could not be downloaded'
const MESSAGE = `The model '${BROKEN}' is out of service: ${SUMMARY}. It stays so until the server's operator acts: use a model that is ready (the model list says which).`

async function outOfServiceServer (t: Test) {
  const broken = new UnavailableBackend(BROKEN, 'its files could not be downloaded: could not reach the Hugging Face Hub', 'run: npx chatd pull broken', SUMMARY)
  const slow = new ScriptedBackend({ id: 'slow', loadGate: new Promise(() => {}) })
  const built = await buildTestApp(t, { backends: [broken, slow] })
  void built.models.loadAll().catch(() => {})
  await built.app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`
  /** Requests chatd answered on `route` with `status`, from its /metrics. */
  const answered = async (route: string, status: number): Promise<number> => {
    const text = (await built.app.inject({ url: '/metrics' })).body
    const line = text.split('\n').find(l => l.startsWith(`chatd_http_requests_total{route="${route}",method="POST",status="${status}"}`))
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return { ...built, origin, answered }
}

t.test('the SDKs, with their default retries, stop at the first answer on every door', async t => {
  const { origin, key, answered } = await outOfServiceServer(t)
  const openai = new OpenAI({ apiKey: key, baseURL: `${origin}/api/v1` }) // maxRetries: the SDK's default (2)
  const anthropic = new Anthropic({ apiKey: key, baseURL: `${origin}/api` })

  const chat = await openai.chat.completions.create({ model: BROKEN, messages: [{ role: 'user', content: 'hi' }] }).catch((err: unknown) => err)
  t.ok(chat instanceof OpenAI.BadRequestError, 'chat completions: BadRequestError')
  t.match(chat, { status: 400, code: 'model_out_of_service', param: 'model', message: `400 ${MESSAGE}` })
  t.equal(await answered('/api/v1/chat/completions', 400), 1, 'one request: the SDK did not retry')

  const streamed = await openai.chat.completions.create({ model: BROKEN, messages: [{ role: 'user', content: 'hi' }], stream: true }).catch((err: unknown) => err)
  t.match(streamed, { status: 400, code: 'model_out_of_service' }, 'streamed: the status, before any event')

  const response = await openai.responses.create({ model: BROKEN, input: 'hi' }).catch((err: unknown) => err)
  t.ok(response instanceof OpenAI.BadRequestError, 'Responses: BadRequestError')
  t.match(response, { status: 400, code: 'model_out_of_service', message: `400 ${MESSAGE}` })
  t.equal(await answered('/api/v1/responses', 400), 1, 'one request')

  const message = await anthropic.messages.create({ model: BROKEN, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }).catch((err: unknown) => err)
  t.ok(message instanceof Anthropic.BadRequestError, 'Messages: the Anthropic SDK\'s BadRequestError')
  t.match(message, { status: 400, error: { type: 'error', error: { type: 'invalid_request_error', message: MESSAGE } } })
  const stream = await anthropic.messages.stream({ model: BROKEN, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }).finalMessage().catch((err: unknown) => err)
  t.ok(stream instanceof Anthropic.BadRequestError, 'Messages streamed: the same')
  t.equal(await answered('/api/v1/messages', 400), 2, 'one request each')

  // Still loading: 503 with Retry-After, what clients retry, as they should.
  const loading = await fetch(`${origin}/api/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'hi' }] }) })
  t.equal(loading.status, 503)
  t.equal(loading.headers.get('retry-after'), '5')
  t.match(await loading.json(), { error: { code: 'model_unavailable', type: 'server_error' } })
  const loadingMessage = await fetch(`${origin}/api/v1/messages`, { method: 'POST', headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'slow', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }) })
  t.equal(loadingMessage.status, 503)
  t.equal(loadingMessage.headers.get('retry-after'), '5')
  t.match(await loadingMessage.json(), { type: 'error', error: { type: 'api_error' } })

  // The model list says which is which before anything is sent (docs/agents.md: check it first).
  const list = await openai.models.list()
  t.match(list.data.map(m => ({ id: m.id, ...(m as unknown as Record<string, unknown>) })), [
    { id: BROKEN, status: 'unavailable', status_reason: SUMMARY },
    { id: 'slow', status: 'loading' },
  ])
})

/** Runs an installed agent to its end (or the bound), stdin closed. */
async function runAgent (command: string[], args: string[], env: Record<string, string | undefined>, cwd: string): Promise<{ code: number | null; output: string }> {
  const [program, ...launcher] = command
  const child = spawn(program!, [...launcher, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => { output += text })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { output += text })
  // Only a bound for an agent that keeps retrying (what a 503 made them do): a retrying run is killed and fails.
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000)
  const code = await new Promise<number | null>(resolve => child.once('close', resolve)).finally(() => clearTimeout(timer))
  return { code, output }
}

function tempDir (t: Test, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

t.test('codex exec stops at the first answer and shows chatd\'s reason', async t => {
  const command = agentCommand(t, CODEX)
  if (!command) return
  const { origin, key, answered } = await outOfServiceServer(t)
  const dir = tempDir(t, 'chatd-codex-oos-')
  const home = join(dir, 'home')
  mkdirSync(home)
  writeFileSync(join(home, 'config.toml'), [
    `model = "${BROKEN}"`, 'model_provider = "chatd"', 'check_for_update_on_startup = false', '', '[analytics]', 'enabled = false', '',
    '[model_providers.chatd]', 'name = "chatd"', `base_url = "${origin}/api/v1"`, 'env_key = "CHATD_API_KEY"', 'wire_api = "responses"', '',
  ].join('\n'))
  const run = await runAgent(command, ['exec', '--skip-git-repo-check', '--ephemeral', '--color', 'never', '-C', dir, 'Say hi'], { ...process.env, CODEX_HOME: home, CHATD_API_KEY: key, NO_COLOR: '1' }, dir)
  t.equal(run.code, 1, `codex exits 1 (output: ${run.output.slice(-1500)})`)
  t.ok(run.output.includes(MESSAGE), 'it shows chatd\'s reason')
  t.notMatch(run.output, /Reconnecting/, 'no retry')
  t.equal(await answered('/api/v1/responses', 400), 1, 'one request')
  t.equal(await answered('/api/v1/responses', 503), 0)
})

t.test('claude -p stops at the first answers and shows chatd\'s reason', async t => {
  const command = agentCommand(t, CLAUDE_CODE)
  if (!command) return
  const { origin, key, answered } = await outOfServiceServer(t)
  const home = tempDir(t, 'chatd-claude-oos-')
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    ANTHROPIC_BASE_URL: `${origin}/api`,
    ANTHROPIC_API_KEY: key,
    ANTHROPIC_MODEL: BROKEN,
    ANTHROPIC_SMALL_FAST_MODEL: BROKEN,
    CLAUDE_CODE_MAX_CONTEXT_TOKENS: '16384',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '2048',
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  }
  const run = await runAgent(command, ['-p', 'Say hi'], env, home)
  t.equal(run.code, 1, `claude exits 1 (output: ${run.output.slice(-1500)})`)
  t.ok(run.output.includes(`API Error: 400 ${MESSAGE}`), 'it shows chatd\'s reason')
  // On a 400 Claude Code 2.1.332 tries the request again without each optional beta it sent (a
  // gateway may refuse one), at once: six requests in all, none of them a retry that waits.
  const refused = await answered('/api/v1/messages', 400)
  t.ok(refused >= 1 && refused <= 6, `at most its six variants of the turn (${refused})`)
  t.equal(await answered('/api/v1/messages', 503), 0)
})
