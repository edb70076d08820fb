// The new-key page's set-up: curl, the openai package, the Agents SDK, Codex's
// config.toml and Claude Code's variables, filled in with this server's
// address, a ready model (for each agent, the first ready one whose window
// holds its prompt), the key's tier and the new key. The snippets are taken
// from the page as a browser shows them and run as a user would paste them
// (bash, node, and claude -p itself when it is installed) against the server
// listening on loopback; with no ready model the page says so; the address
// honours TRUST_PROXY; a hostile Host header or model id cannot put markup on
// the page.

import { execFile } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import type { Backend } from '../../src/engine/backend.ts'
import { UnavailableBackend } from '../../src/engine/registry.ts'
import { setupSnippets, type SetupTier } from '../../src/dashboard/setup-snippets.ts'
import { agentCommand } from '../helpers/agents.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
import { CLAUDE_CODE } from '../../scripts/agents.ts'
import { Browser } from './jar.ts'

const run = promisify(execFile)
const TIERS = JSON.stringify({ tiers: { free: { requests_per_minute: 100, models: ['local', 'remote', 'scripted', 'slow', 'broken', 'a<b>"x\'y&z'] }, unlimited: {} } })

/** What a browser shows of an element's text (the page's few entities decoded). */
function textOf (html: string, id: string): string | undefined {
  const match = new RegExp(`<(pre|code|p|ul)[^>]* id="${id}"[^>]*>([\\s\\S]*?)</\\1>`).exec(html)
  return match?.[2].replace(/<[^>]+>/g, '').replaceAll('&lt;', '<').replaceAll('&gt;', '>').replaceAll('&quot;', '"').replaceAll('&#39;', "'").replaceAll('&amp;', '&')
}

let accountsMade = 0

/** Registers a new account in `browser` (on the default tier, free) and creates a key: the page that shows it. */
async function newKeyPage (t: Test, browser: Browser): Promise<{ html: string; key: string }> {
  const email = `user${++accountsMade}@example.com`
  const registered = await browser.post('/api/register', { email, password: 'a password', confirm: 'a password' }, { csrfFrom: '/api/register' })
  if (registered.statusCode !== 303) throw new Error(`registration failed: ${registered.statusCode} ${registered.body}`)
  const res = await browser.post('/api/keys', { name: 'laptop' }, { csrfFrom: '/api' })
  if (res.statusCode !== 201) throw new Error(`key creation failed: ${res.statusCode} ${res.body}`)
  t.equal(res.headers['cache-control'], 'no-store', 'the page with the key is never cached')
  const key = /<code id="new-key" class="key">(sk-chatd-[A-Za-z0-9]{32})<\/code>/.exec(res.body)![1]
  return { html: res.body, key }
}

/** The value of a top-level `name = 123` in a config.toml snippet. */
function tomlNumber (toml: string, name: string): number | undefined {
  const line = new RegExp(`^${name} = (\\d+)$`, 'm').exec(toml)
  return line ? Number(line[1]) : undefined
}

/** The value of `name = "…"` in a config.toml snippet (flat string keys only: all this one holds). */
function tomlValue (toml: string, name: string, table = ''): string | undefined {
  let current = ''
  for (const line of toml.split('\n')) {
    const header = /^\[(.+)\]$/.exec(line)
    if (header) current = header[1]
    const pair = /^([A-Za-z_]+) = (".*")$/.exec(line)
    if (pair && current === table && pair[1] === name) return JSON.parse(pair[2]) as string
  }
  return undefined
}

t.test('with ready models: every snippet has the real address, the local model and the key, and works when pasted', async t => {
  const { app, models } = await buildTestApp(t, {
    tiers: TIERS,
    backends: [new ScriptedBackend({ id: 'remote', words: ['From', ' remote'] }), new ScriptedBackend({ id: 'local', words: ['Hello', ' there'] })],
  })
  // As ModelRegistry.fromFile registers an onnx entry: with the execution provider it asked for.
  models.get('local')!.requestedDevice = 'cpu'
  await app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const browser = new Browser(app)
  browser.headers.host = new URL(origin).host
  const { html, key } = await newKeyPage(t, browser)

  t.equal(textOf(html, 'setup-model'), 'local', 'the local model is preferred over the first ready one')
  t.notMatch(html, /"model":"…"|model: '…'/, 'no placeholder model')
  const curl = textOf(html, 'setup-curl')!
  const node = textOf(html, 'setup-node')!
  const agentsSdk = textOf(html, 'setup-agents-sdk')!
  const codex = textOf(html, 'setup-codex')!
  const codexKey = textOf(html, 'setup-codex-key')!
  const claude = textOf(html, 'setup-claude-code')!
  for (const [name, text] of Object.entries({ curl, node, agentsSdk, codexKey, claude })) t.ok(text.includes(key), `${name} holds the key`)
  for (const [name, text] of Object.entries({ curl, node, agentsSdk, codex, claude })) {
    t.ok(text.includes(origin), `${name} holds this server's address`)
    t.match(text, /\blocal\b/, `${name} names the ready model`)
  }
  for (const id of ['new-key', 'setup-curl', 'setup-node', 'setup-agents-sdk', 'setup-codex', 'setup-codex-key', 'setup-claude-code']) {
    t.match(html, new RegExp(`<button type="button" class="copy" data-copy="${id}"`), `${id} has a copy button`)
  }
  t.ok(html.indexOf('data-copy="new-key"') < html.indexOf('data-copy="setup-'), 'the key\'s own button comes first')
  t.notMatch(html, /<script>/, 'no inline script (the CSP forbids it): the copy buttons are copy.js\'s')

  // Pasted into a shell, as is.
  const fromCurl = JSON.parse((await run('bash', ['-c', curl.replace('curl ', 'curl -s ')])).stdout) as { model: string; choices: Array<{ message: { content: string } }> }
  t.equal(fromCurl.model, 'local')
  t.equal(fromCurl.choices[0].message.content, 'Hello there', 'the curl snippet gets a completion')

  // Saved as hello.mjs and run with node, where the openai package is installed.
  const dir = t.testdir()
  writeFileSync(join(dir, 'hello.mjs'), node)
  t.equal((await run(process.execPath, [join(dir, 'hello.mjs')], { cwd: dir })).stdout.trim(), 'Hello there', 'the openai snippet prints the reply')
  writeFileSync(join(dir, 'agent.mjs'), agentsSdk)
  t.equal((await run(process.execPath, [join(dir, 'agent.mjs')], { cwd: dir })).stdout.trim(), 'Hello there', 'the Agents SDK snippet prints the run\'s final output')

  // Codex: config.toml's provider and the export line; it POSTs <base_url>/responses with the key from env_key.
  t.equal(tomlValue(codex, 'model'), 'local')
  t.equal(tomlValue(codex, 'model_provider'), 'chatd')
  t.equal(tomlValue(codex, 'name', 'model_providers.chatd'), 'chatd')
  t.equal(tomlValue(codex, 'base_url', 'model_providers.chatd'), `${origin}/api/v1`)
  t.equal(tomlValue(codex, 'env_key', 'model_providers.chatd'), 'CHATD_API_KEY')
  t.equal(tomlValue(codex, 'wire_api', 'model_providers.chatd'), 'responses')
  t.equal(codexKey, `export CHATD_API_KEY=${key}`)
  const responses = await run('bash', ['-c', `${codexKey}\ncurl -s "$1/responses" -H "Authorization: Bearer $CHATD_API_KEY" -H 'Content-Type: application/json' -d "{\\"model\\":\\"$2\\",\\"input\\":\\"Hi\\"}"`, 'codex', tomlValue(codex, 'base_url', 'model_providers.chatd')!, tomlValue(codex, 'model')!])
  t.match(JSON.parse(responses.stdout), { object: 'response', model: 'local', status: 'completed' }, 'Codex\'s provider answers')

  // Claude Code: the variables, then the request it makes (POST $ANTHROPIC_BASE_URL/v1/messages with x-api-key).
  const env = await run('bash', ['-c', `${claude}\nenv`])
  const vars = Object.fromEntries(env.stdout.split('\n').map(l => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]))
  t.match(vars, {
    ANTHROPIC_BASE_URL: `${origin}/api`,
    ANTHROPIC_API_KEY: key,
    ANTHROPIC_MODEL: 'local',
    CLAUDE_CODE_MAX_CONTEXT_TOKENS: '512',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: '64',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  }, 'the variables as docs/api.md gives them, the window the model\'s own')
  const messages = await run('bash', ['-c', `${claude}\ncurl -s "$ANTHROPIC_BASE_URL/v1/messages?beta=true" -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'Content-Type: application/json' -d "{\\"model\\":\\"$ANTHROPIC_MODEL\\",\\"max_tokens\\":32,\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"Hi\\"}]}"`])
  t.match(JSON.parse(messages.stdout), { type: 'message', model: 'local', content: [{ type: 'text', text: 'Hello there' }] }, 'Claude Code\'s variables reach the Messages API')

  t.match(html, /No model on this server has a window that holds Codex&#39;s prompt \(about 8,000 tokens\): local&#39;s \(512 tokens\) does not/, 'a window too small for the agents is said under their snippets')
  t.match(html, /holds Claude Code&#39;s prompt \(about 12,000 tokens\)/)
  t.equal(tomlNumber(codex, 'model_context_window'), 512, 'Codex is told the model\'s window')

  const home = await browser.get('/api')
  t.notOk(home.body.includes(key.slice(15)), 'the key is on the new-key page only')
})

t.test('the address honours TRUST_PROXY: a trusted proxy\'s X-Forwarded-Proto and -Host, never an untrusted client\'s', async t => {
  const forwarded = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'chat.example.com' }
  const proxied = await buildTestApp(t, { tiers: TIERS, env: { TRUST_PROXY: 'true' } })
  const viaProxy = new Browser(proxied.app)
  Object.assign(viaProxy.headers, forwarded)
  const { html } = await newKeyPage(t, viaProxy)
  t.match(textOf(html, 'setup-curl'), /^curl https:\/\/chat\.example\.com\/api\/v1\/chat\/completions /)
  t.match(textOf(html, 'setup-claude-code'), /^export ANTHROPIC_BASE_URL=https:\/\/chat\.example\.com\/api$/m)

  const direct = await buildTestApp(t, { tiers: TIERS })
  const spoofing = new Browser(direct.app)
  Object.assign(spoofing.headers, forwarded, { host: 'chatd.internal:8080' })
  const page = await newKeyPage(t, spoofing)
  t.match(textOf(page.html, 'setup-curl'), /^curl http:\/\/chatd\.internal:8080\/api\/v1\/chat\/completions /, 'without TRUST_PROXY the Host header, as sent')
  t.notMatch(page.html, /chat\.example\.com/)

  const v6 = new Browser(direct.app)
  v6.headers.host = '[::1]:8080'
  const ipv6 = await newKeyPage(t, v6)
  t.match(textOf(ipv6.html, 'setup-curl'), /^curl -g 'http:\/\/\[::1\]:8080\/api\/v1\/chat\/completions' /, 'an IPv6 address is quoted and not globbed by curl')
})

t.test('no ready model: the page says so and lists each model with its state, naming none in an example', async t => {
  const { app } = await buildTestApp(t, {
    tiers: TIERS,
    backends: [
      new ScriptedBackend({ id: 'slow', loadGate: new Promise(() => {}) }),
      new UnavailableBackend('broken', 'model files not found at /srv/models/broken', 'run chatd pull broken', 'its files are not on this server yet'),
      new ScriptedBackend({ id: 'forbidden' }),
    ],
  })
  const browser = new Browser(app)
  const { html, key } = await newKeyPage(t, browser)
  t.match(textOf(html, 'setup-none'), /No model is ready right now/)
  const list = textOf(html, 'setup-models')!.replace(/\s+/g, ' ')
  t.match(list, /slow: loading/)
  t.match(list, /broken: unavailable: its files are not on this server yet/)
  t.match(list, /forbidden: ready, but your tier may not use it/, 'a ready model the tier may not use is not offered')
  t.notMatch(html, /\/srv\/models|chatd pull/, 'the operator\'s reason stays with operators')
  for (const id of ['setup-curl', 'setup-node', 'setup-codex', 'setup-claude-code']) t.notOk(textOf(html, id), `no ${id}`)
  t.notMatch(html, /"model":/, 'no example names a model')
  t.equal(textOf(html, 'setup-models-curl'), `curl http://localhost:80/api/v1/models -H 'Authorization: Bearer ${key}'`, 'how to see when one is ready')
})

t.test('hostile values: a Host header and a model id with markup are escaped or refused, never markup', async t => {
  const odd = 'a<b>"x\'y&z'
  const { app } = await buildTestApp(t, { tiers: TIERS, backends: [new ScriptedBackend({ id: odd })] })

  const attacker = new Browser(app)
  attacker.headers.host = 'evil.example"><script>alert(1)</script><x a="'
  const hostile = await newKeyPage(t, attacker)
  t.notMatch(hostile.html, /<script>|alert\(1\)|evil\.example/, 'the Host header is not on the page at all')
  t.match(textOf(hostile.html, 'setup-none'), /Host.*header is not a server address/)
  t.notOk(textOf(hostile.html, 'setup-curl'), 'no example built around it')
  for (const host of ['a b', "it's", 'x;rm -rf ~', 'a/b', '$(id)', 'x'.repeat(300)]) {
    attacker.headers.host = host
    const page = await attacker.post('/api/keys', { name: 'k' }, { csrfFrom: '/api' })
    t.equal(page.statusCode, 201)
    t.notOk(textOf(page.body, 'setup-curl'), `Host ${JSON.stringify(host.slice(0, 20))} gives no example`)
  }

  const browser = new Browser(app)
  const { html, key } = await newKeyPage(t, browser)
  t.notMatch(html, /a<b>|<b>"x/, 'the model id is never raw markup')
  t.match(html, /<code id="setup-model">a&lt;b&gt;&quot;x&#39;y&amp;z<\/code>/, 'escaped where it is shown')
  t.equal(textOf(html, 'setup-model'), odd)
  // And quoted for each language, so the pasted value is the id itself.
  const claude = textOf(html, 'setup-claude-code')!
  const env = await run('bash', ['-c', `${claude}\nprintf %s "$ANTHROPIC_MODEL"`])
  t.equal(env.stdout, odd, 'the shell reads the id whole')
  const body = /-d (.+)$/m.exec(textOf(html, 'setup-curl')!)![1]
  t.same(JSON.parse((await run('bash', ['-c', `printf %s ${body}`])).stdout), { model: odd, messages: [{ role: 'user', content: 'Hello' }] }, 'curl sends the id in valid JSON')
  t.equal(tomlValue(textOf(html, 'setup-codex')!, 'model'), odd)
  t.match(textOf(html, 'setup-node'), `model: ${JSON.stringify(odd)},`)
  t.ok(textOf(html, 'setup-curl')!.includes(key))
})

t.test('Claude Code\'s window and output follow the model\'s context and the key\'s tier; an unknown window is said, not guessed', async t => {
  const byId = (snippets: ReturnType<typeof setupSnippets>, id: string) => snippets.find(s => s.id === id)!
  const url = 'https://chat.example.com'
  const key = `sk-chatd-${'a'.repeat(32)}`
  const unlimited = { name: 'unlimited', maxTokensPerRequest: null, tokensPerMinute: null }
  const free = { name: 'free', maxTokensPerRequest: 2048, tokensPerMinute: 20000 }
  const pro = { name: 'pro', maxTokensPerRequest: 8192, tokensPerMinute: 400000 }
  const snippets = (model: { id: string; contextLength?: number }, tier: SetupTier) =>
    setupSnippets({ url, key, model, agents: { codex: { model, ready: true }, claudeCode: { model, ready: true } }, tier })
  const output = (text: string) => Number(/^export CLAUDE_CODE_MAX_OUTPUT_TOKENS=(\d+)$/m.exec(text)?.[1])

  const large = snippets({ id: 'deepseek-r1-distill-qwen-1.5b', contextLength: 32768 }, pro)
  t.match(byId(large, 'setup-claude-code').text, /^export CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768\nexport CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096$/m, 'as docs/agents.md advises for a 32k window, on a tier that allows it')
  t.notMatch(byId(large, 'setup-claude-code').note, /No model|No ready model/)
  t.match(byId(large, 'setup-codex').note, /It names deepseek-r1-distill-qwen-1\.5b, the first ready model that holds Codex's prompt \(about 8,000 tokens\) \(its window is 32,768 tokens\)/)
  t.equal(output(byId(snippets({ id: 'm', contextLength: 32768 }, free), 'setup-claude-code').text), 2048, 'the free tier allows 2,048 tokens a request: no more is asked for')
  t.match(byId(snippets({ id: 'm', contextLength: 32768 }, free), 'setup-claude-code').note, /the least of 4,096, an eighth of the window, your tier's 2,048 tokens per request, what its 20,000 tokens a minute leave after the prompt/)
  t.equal(output(byId(snippets({ id: 'm', contextLength: 16384 }, pro), 'setup-claude-code').text), 2048, 'an eighth of a 16k window')
  t.equal(output(byId(snippets({ id: 'm', contextLength: 131072 }, { name: 'tight', maxTokensPerRequest: null, tokensPerMinute: 13000 }), 'setup-claude-code').text), 1000, 'what the minute leaves after the prompt')
  const starved = byId(snippets({ id: 'm', contextLength: 131072 }, { name: 'tiny', maxTokensPerRequest: 100, tokensPerMinute: 5000 }), 'setup-claude-code')
  t.equal(output(starved.text), 1, 'never below 1')
  t.match(starved.note, /Your tier \(tiny\) allows 5,000 tokens a minute, less than one Claude Code turn's prompt: its turns will be refused\./)

  const unknown = byId(snippets({ id: 'upstream' }, free), 'setup-claude-code').text
  t.notMatch(unknown, /^export CLAUDE_CODE_MAX_CONTEXT_TOKENS/m)
  t.match(unknown, /^# CLAUDE_CODE_MAX_CONTEXT_TOKENS: this model's context window is not known to chatd/m)
  t.equal(output(unknown), 2048, 'the tier bounds it even where the window is unknown')
  t.equal(output(byId(snippets({ id: 'upstream' }, unlimited), 'setup-claude-code').text), 4096)
  const codexUnknown = byId(snippets({ id: 'upstream' }, free), 'setup-codex').text
  t.match(codexUnknown, /^# model_context_window: this model's window is not known to chatd/m)
})

/** A registered account's new-key page on the shipped tiers.json (the default tier, free: 2,048 tokens a request). */
async function freeTierPage (t: Test, backends: Backend[], local?: string) {
  const built = await buildTestApp(t, { backends })
  if (local) built.models.get(local)!.requestedDevice = 'cpu'
  await built.app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`
  const browser = new Browser(built.app)
  browser.headers.host = new URL(origin).host
  return { ...built, origin, ...await newKeyPage(t, browser) }
}

t.test('each agent gets the first ready model whose window holds its prompt, not the small local model curl uses', async t => {
  const { html, key, origin } = await freeTierPage(t, [
    new ScriptedBackend({ id: 'local', words: ['Small'] }),
    new ScriptedBackend({ id: 'mid', words: ['Mid'], contextLength: 10000 }),
    new ScriptedBackend({ id: 'remote', words: ['From', ' remote'], contextLength: null }),
  ], 'local')
  t.equal(textOf(html, 'setup-model'), 'local', 'curl and Node still name the local model')
  t.match(textOf(html, 'setup-curl'), /"model":"local"/)
  const codex = textOf(html, 'setup-codex')!
  t.equal(tomlValue(codex, 'model'), 'mid', 'Codex: the first ready model whose window holds about 8,000 tokens')
  t.equal(tomlNumber(codex, 'model_context_window'), 10000)
  t.match(html, /It names mid, the first ready model that holds Codex&#39;s prompt \(about 8,000 tokens\) \(its window is 10,000 tokens\)/)
  const claude = textOf(html, 'setup-claude-code')!
  t.match(claude, /^export ANTHROPIC_MODEL=remote$/m, 'Claude Code: mid cannot hold about 12,000 tokens; remote\'s window is unknown')
  t.match(claude, /^export ANTHROPIC_SMALL_FAST_MODEL=remote$/m)
  t.match(html, /It names remote, the first ready model that holds Claude Code&#39;s prompt \(about 12,000 tokens\) \(its window is not known to chatd\)/)

  // Pasted: Claude Code's request (POST $ANTHROPIC_BASE_URL/v1/messages with its max_tokens) is answered by remote, within the free tier.
  const messages = await run('bash', ['-c', `${claude}\ncurl -s "$ANTHROPIC_BASE_URL/v1/messages?beta=true" -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'Content-Type: application/json' -d "{\\"model\\":\\"$ANTHROPIC_MODEL\\",\\"max_tokens\\":$CLAUDE_CODE_MAX_OUTPUT_TOKENS,\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"Hi\\"}]}"`])
  t.match(JSON.parse(messages.stdout), { type: 'message', model: 'remote', content: [{ type: 'text', text: 'From remote' }] }, 'the page\'s max_tokens fits the free tier')
  t.ok(claude.includes(key) && claude.includes(origin))
})

t.test('no ready model holds an agent\'s prompt: the page names the one that would once it is ready, or says none can', async t => {
  const { html } = await freeTierPage(t, [
    new ScriptedBackend({ id: 'local', words: ['Small'] }),
    new ScriptedBackend({ id: 'big', loadGate: new Promise(() => {}), contextLength: 32768 }),
  ], 'local')
  t.equal(tomlValue(textOf(html, 'setup-codex')!, 'model'), 'big', 'the loading model that can hold it')
  t.match(textOf(html, 'setup-claude-code'), /^export ANTHROPIC_MODEL=big$/m)
  t.match(html, /No ready model holds Claude Code&#39;s prompt \(about 12,000 tokens\); big can \(its window is 32,768 tokens\) once it is ready \(now: loading\): ask the server&#39;s operator\./)

  const unset = await freeTierPage(t, [
    new ScriptedBackend({ id: 'local', words: ['Small'] }),
    new UnavailableBackend('remote', 'environment variable UPSTREAM_BASE_URL not set', 'set UPSTREAM_BASE_URL in the environment or .env', 'its configuration on this server is incomplete'),
  ], 'local')
  t.match(unset.html, /remote can \(its window is not known to chatd\) once it is ready \(now: unavailable: its configuration on this server is incomplete\): ask the server&#39;s operator/, 'the one to configure, with its short reason')
  t.notMatch(unset.html, /UPSTREAM_BASE_URL/, 'never the operator\'s reason')

  const none = await freeTierPage(t, [new ScriptedBackend({ id: 'local', words: ['Small'] })], 'local')
  t.match(textOf(none.html, 'setup-claude-code'), /^export ANTHROPIC_MODEL=local$/m, 'the only model, named with a warning')
  t.match(none.html, /No model on this server has a window that holds Claude Code&#39;s prompt \(about 12,000 tokens\): local&#39;s \(512 tokens\) does not, so this will fail\. Ask the server&#39;s operator for a model with a window of at least 12,000 tokens/)
})

t.test('claude -p, with the Claude Code variables as the page gives them on the free tier, gets its answer', async t => {
  // Skipped, saying how to install it, when Claude Code is not installed; a failure in CI.
  const claudeCode = agentCommand(t, CLAUDE_CODE)
  if (!claudeCode) return
  // A tier with the free tier's 2,048 tokens a request and no minute limit: what is checked is the page's max_tokens.
  const tiers = JSON.stringify({ default: 'free', tiers: { free: { max_tokens_per_request: 2048, models: ['*'] } } })
  const built = await buildTestApp(t, { tiers, backends: [new ScriptedBackend({ id: 'remote', words: ['Answered', ' by chatd'], contextLength: 32768 })] })
  await built.app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`
  const browser = new Browser(built.app)
  browser.headers.host = new URL(origin).host
  const { html } = await newKeyPage(t, browser)
  const claude = textOf(html, 'setup-claude-code')!
  t.match(claude, /^export CLAUDE_CODE_MAX_OUTPUT_TOKENS=2048$/m)
  const home = t.testdir()
  const command = claudeCode[0]!
  // The page's lines, then claude -p, in a shell with nothing else of this process's environment.
  const result = await run('bash', ['-c', `${claude}\nexec "$0" -p 'Say hi' < /dev/null`, command], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home }, cwd: home, timeout: 120_000 }).catch((err: { stdout?: string; stderr?: string; code?: number }) => err)
  t.equal((result as { code?: number }).code ?? 0, 0, `claude -p exits 0 (${(result as { stderr?: string }).stderr ?? ''})`)
  t.match(result.stdout, 'Answered by chatd', 'the first turn is answered, not refused for its max_tokens')
})
