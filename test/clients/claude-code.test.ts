// Claude Code itself (`claude -p`, the pinned version scripts/agents.ts puts in its cache folder)
// pointed at chatd with ANTHROPIC_BASE_URL and a chatd key. chatd relays the model
// to a scripted chat-completions upstream on loopback that asks for one Bash command; Claude Code
// runs it, sends its output back through chatd as a tool_result, and ends with the upstream's
// final answer (which quotes the output it was sent) and exit code 0. Without the binary the test
// skips saying how to install it, unless CHATD_REQUIRE_SERVICES=1 (CI), where that is a failure
// (agentCommand, test/helpers/agents.ts).
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import type http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { CLAUDE_CODE } from '../../scripts/agents.ts'
import { agentCommand } from '../helpers/agents.ts'
import { MODEL, relayThroughChatd, sentBodies } from './harness.ts'
import { chunk, sseData, sseHead } from '../upstream/loopback.ts'

const COMMAND = 'echo chatd-was-here'

/** One chat-completions reply, streamed or whole, as the upstream's client asked. */
function reply (res: http.ServerResponse, stream: boolean, message: { content: string | null; call?: { id: string; name: string; arguments: string } }): void {
  const finish = message.call ? 'tool_calls' : 'stop'
  const usage = { prompt_tokens: 12000, completion_tokens: 20, total_tokens: 12020 }
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json' })
    const calls = message.call ? [{ id: message.call.id, type: 'function', function: { name: message.call.name, arguments: message.call.arguments } }] : undefined
    res.end(JSON.stringify({ id: 'chatcmpl-up', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: message.content, ...(calls ? { tool_calls: calls } : {}) }, finish_reason: finish }], usage }))
    return
  }
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: message.content === null ? null : '' }))
  if (message.content) sseData(res, chunk({ content: message.content }))
  if (message.call) {
    sseData(res, chunk({ tool_calls: [{ index: 0, id: message.call.id, type: 'function', function: { name: message.call.name, arguments: '' } }] }))
    const args = message.call.arguments
    sseData(res, chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(0, 10) } }] }))
    sseData(res, chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(10) } }] }))
  }
  sseData(res, chunk({}, finish))
  sseData(res, { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage })
  sseData(res, '[DONE]')
  res.end()
}

function runClaude (claude: string[], args: string[], env: Record<string, string>, cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise(resolve => {
    execFile(claude[0]!, [...claude.slice(1), ...args], { env, cwd, timeout: 120_000, maxBuffer: 10 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : null) : 0
      resolve({ code, stdout, stderr })
    }).stdin?.end()
  })
}

t.test('claude -p runs one Bash command through chatd and ends with the final answer', async t => {
  const claude = agentCommand(t, CLAUDE_CODE)
  if (!claude) return
  const relay = await relayThroughChatd(t, (_req, res, recorded) => {
    const body = JSON.parse(recorded.body) as { stream?: boolean; messages: Array<{ role: string; content: unknown }>; tools?: Array<{ function: { name: string } }> }
    const result = body.messages.find(m => m.role === 'tool')
    if (result) return reply(res, body.stream === true, { content: `Bash said: ${String(result.content).trim()}` })
    if (!(body.tools ?? []).some(tool => tool.function.name === 'Bash')) return reply(res, body.stream === true, { content: 'ok' })
    reply(res, body.stream === true, { content: null, call: { id: 'call_bash1', name: 'Bash', arguments: JSON.stringify({ command: COMMAND, description: 'Print a marker' }) } })
  })
  const home = mkdtempSync(join(tmpdir(), 'claude-home-'))
  const work = mkdtempSync(join(tmpdir(), 'claude-work-'))
  t.teardown(() => {
    rmSync(home, { recursive: true, force: true })
    rmSync(work, { recursive: true, force: true })
  })
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    ANTHROPIC_BASE_URL: relay.baseURL.replace(/\/v1$/, ''),
    ANTHROPIC_API_KEY: relay.key,
    ANTHROPIC_MODEL: MODEL,
    ANTHROPIC_SMALL_FAST_MODEL: MODEL,
    // The set-up docs/api.md gives: the model's real window, and room left in it for the prompt
    // (with the default 32000-token output reserve a 32k window compacts on every turn).
    CLAUDE_CODE_MAX_CONTEXT_TOKENS: '32768',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '4096',
    DISABLE_TELEMETRY: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  }
  // As root, -p refuses --dangerously-skip-permissions: the one command is allowed instead.
  const run = await runClaude(claude, ['-p', 'Run the marker command and tell me what it printed.', '--allowedTools', `Bash(${COMMAND})`], env, work)
  t.equal(run.code, 0, `exit code 0 (stderr: ${run.stderr.slice(0, 500)})`)
  t.match(run.stdout, 'Bash said: chatd-was-here', 'the final answer carries the output Claude Code sent back')

  const sent = sentBodies(relay.upstream)
  const withResult = sent.filter(b => b.messages.some((m: { role: string }) => m.role === 'tool'))
  t.equal(withResult.length, 1, 'one turn carried the tool result')
  const last = withResult[0]
  const call = last.messages.find((m: { role: string; tool_calls?: unknown[] }) => m.role === 'assistant' && m.tool_calls)
  t.equal(call.tool_calls[0].function.name, 'Bash')
  t.same(JSON.parse(call.tool_calls[0].function.arguments), { command: COMMAND, description: 'Print a marker' }, 'the call went back as it was made')
  const result = last.messages.find((m: { role: string }) => m.role === 'tool')
  t.equal(result.tool_call_id, call.tool_calls[0].id, 'the result answers that call')
  t.match(result.content, 'chatd-was-here')
  t.ok(last.tools.length >= 5, `Claude Code's tools were offered upstream (${last.tools.length})`)

  // Every request Claude Code made was a message request chatd answered with 200 and metered.
  const rows = await relay.db.selectFrom('usage_records').select(['status', 'request_id']).execute()
  t.ok(rows.length >= 2 && rows.every(r => r.status === 'completed' && String(r.request_id).startsWith('msg_')), `usage rows: ${JSON.stringify(rows)}`)
})
