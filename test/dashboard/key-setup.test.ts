// The new-key page's set-up: curl, the openai package, Codex's config.toml and
// Claude Code's variables, filled in with this server's address, a ready model
// and the new key. The snippets are taken from the page as a browser shows
// them and run as a user would paste them (bash, node) against the server
// listening on loopback; with no ready model the page says so; the address
// honours TRUST_PROXY; a hostile Host header or model id cannot put markup on
// the page.

import { execFile } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { UnavailableBackend } from '../../src/engine/registry.ts'
import { setupSnippets } from '../../src/dashboard/setup-snippets.ts'
import { buildTestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'
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
  const codex = textOf(html, 'setup-codex')!
  const codexKey = textOf(html, 'setup-codex-key')!
  const claude = textOf(html, 'setup-claude-code')!
  for (const [name, text] of Object.entries({ curl, node, codexKey, claude })) t.ok(text.includes(key), `${name} holds the key`)
  for (const [name, text] of Object.entries({ curl, node, codex, claude })) {
    t.ok(text.includes(origin), `${name} holds this server's address`)
    t.match(text, /\blocal\b/, `${name} names the ready model`)
  }
  for (const id of ['new-key', 'setup-curl', 'setup-node', 'setup-codex', 'setup-codex-key', 'setup-claude-code']) {
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

  t.match(html, /This model&#39;s window \(512 tokens\) cannot hold Codex&#39;s prompt/, 'a window too small for the agents is said under their snippets')
  t.match(html, /cannot hold Claude Code&#39;s prompt \(about 12,000 tokens\)/)

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

t.test('Claude Code\'s window and output reserve follow the model\'s context; an unknown window is said, not guessed', async t => {
  const byId = (snippets: ReturnType<typeof setupSnippets>, id: string) => snippets.find(s => s.id === id)!
  const url = 'https://chat.example.com'
  const key = `sk-chatd-${'a'.repeat(32)}`
  const large = setupSnippets({ url, key, model: { id: 'deepseek-r1-distill-qwen-1.5b', contextLength: 32768 } })
  t.match(byId(large, 'setup-claude-code').text, /^export CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768\nexport CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096$/m, 'as docs/api.md advises for a 32k window')
  t.notMatch(byId(large, 'setup-claude-code').note, /cannot hold/)
  t.notMatch(byId(large, 'setup-codex').note, /cannot hold/)
  const unknown = byId(setupSnippets({ url, key, model: { id: 'upstream' } }), 'setup-claude-code').text
  t.notMatch(unknown, /^export CLAUDE_CODE_MAX_CONTEXT_TOKENS/m)
  t.match(unknown, /^# CLAUDE_CODE_MAX_CONTEXT_TOKENS: this model's context window is not known to chatd/m)
  t.match(unknown, /^export CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096$/m)
})
