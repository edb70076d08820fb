// The dashboard in a real browser: headless Chromium (Debian's `chromium`
// package at /usr/bin/chromium) driven by playwright-core, against the whole
// server (`chatd serve` as server.ts starts it) on the real stories260k model.
// Register, log out and in, create a key and copy it, copy the set-up's curl
// command and run it, call the API with the key from an HTTP client (the openai SDK), see the call in the usage, revoke the
// key and see the next call fail with 401; a form posted without its CSRF
// token is refused; everything but the copy button works with JavaScript off.
// Each page the test renders is saved as a screenshot under
// bench-out/screenshots/ (git-ignored).

import { execFile } from 'node:child_process'
import { existsSync, mkdirSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import OpenAI from 'openai'
import { chromium, type Browser, type Page } from 'playwright-core'
import { Accounts } from '../../src/accounts/accounts.ts'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import { openMigratedDatabase } from '../../src/store/database.ts'
import { REPO_ROOT, storiesModelEntry } from '../helpers/models.ts'

const CHROMIUM = '/usr/bin/chromium'
const SHOTS = join(REPO_ROOT, 'bench-out', 'screenshots')
const MODEL = 'stories260k'
const ADMIN_KEY = `sk-chatd-${'Br0wser'.repeat(4)}Test`

if (!existsSync(CHROMIUM)) {
  const reason = `${CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium) to run the browser test`
  if (process.env.CHATD_REQUIRE_SERVICES === '1') t.fail(reason)
  else t.pass('dashboard in a real browser', { skip: reason })
} else {
  await run()
}

async function run (): Promise<void> {
  mkdirSync(SHOTS, { recursive: true })
  const dir = t.testdir({
    'models.json': JSON.stringify({ models: [storiesModelEntry(MODEL)] }),
    'tiers.json': JSON.stringify({
      tiers: {
        free: { requests_per_minute: 20, tokens_per_minute: 20000, calls_per_month: 1000, max_tokens_per_request: 256, models: ['*'] },
        pro: { requests_per_minute: 120, calls_per_month: 100000, models: ['*'] },
        unlimited: {},
      },
    }),
  })
  const database = { kind: 'sqlite' as const, path: join(dir, 'chatd.db') }
  const config = loadConfig({
    PORT: '0',
    LOG_LEVEL: 'silent',
    DATABASE_URL: `sqlite://${database.path}`,
    MODELS_FILE: join(dir, 'models.json'),
    TIERS_FILE: join(dir, 'tiers.json'),
    CHATD_ADMIN_KEY: ADMIN_KEY,
    CHATD_AUTO_PULL: '0',
  })
  const app = await startServer(config, { print: () => {}, logger: false })
  t.teardown(() => app.close())
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  const deadline = Date.now() + 60_000
  while ((await app.inject({ url: '/readyz' })).statusCode !== 200) {
    if (Date.now() > deadline) throw new Error('the model did not become ready')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  // The first-start admin has no password; give it one as an operator would (chatd accounts set-password).
  const db = await openMigratedDatabase(database)
  await new Accounts(db).setPassword((await new Accounts(db).getByEmail('admin@localhost')).id, 'admin password')
  await db.destroy()

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  })
  t.teardown(() => browser.close())

  const shot = async (page: Page, name: string): Promise<void> => {
    await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true })
  }
  /** Logs in on the log-in page, as a visitor types it. */
  const logIn = async (page: Page, email: string, password: string): Promise<void> => {
    await page.goto(`${base}/api/login`)
    await page.fill('input[name=email]', email)
    await page.fill('input[name=password]', password)
    await page.click('button[type=submit]')
  }

  t.test('register, log in, create a key, use it, see the usage, revoke it', async t => {
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 } })
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })
    t.teardown(() => context.close())
    const page = await context.newPage()

    await page.goto(`${base}/api`)
    t.equal(new URL(page.url()).pathname, '/api/login', 'signed out: the dashboard sends you to log in')
    await shot(page, 'dashboard-login')

    await page.click('a[href="/api/register"] >> nth=0')
    await page.fill('input[name=email]', 'carol@example.com')
    await page.fill('input[name=password]', 'carol password')
    await page.fill('input[name=confirm]', 'carol password')
    await shot(page, 'dashboard-register')
    await page.click('button[type=submit]')
    t.equal(new URL(page.url()).pathname, '/api', 'registered and logged in')
    t.match(await page.textContent('.page-head'), /carol@example\.com · free tier/)
    const cookies = await context.cookies()
    const session = cookies.find(c => c.name === 'chatd_session')!
    t.match(session, { httpOnly: true, sameSite: 'Lax', path: '/api' }, 'session cookie: HttpOnly, SameSite=Lax')
    // Expressions run in the page; strings, because this project's TypeScript has no DOM types.
    t.equal(await page.evaluate('document.cookie'), '', 'no cookie is readable from page scripts')

    await page.click('nav button:has-text("Log out")')
    t.equal(new URL(page.url()).pathname, '/api/login')
    await page.fill('input[name=email]', 'carol@example.com')
    await page.fill('input[name=password]', 'carol password')
    await page.click('button[type=submit]')
    t.equal(new URL(page.url()).pathname, '/api', 'logged in again')
    await shot(page, 'dashboard-home-empty')

    await page.fill('input[name=name]', 'browser test')
    await page.click('button:has-text("Create key")')
    const key = (await page.textContent('#new-key'))!.trim()
    t.match(key, /^sk-chatd-[A-Za-z0-9]{32}$/, 'the new key is shown')
    const copy = page.locator('button[data-copy="new-key"]')
    t.ok(await copy.isVisible(), 'the copy button shows with JavaScript on')
    await copy.click()
    await page.waitForFunction('document.querySelector("button[data-copy]")?.textContent === "Copied"')
    t.equal(await page.evaluate('navigator.clipboard.readText()'), key, 'the copy button put the key on the clipboard')
    t.equal((await page.textContent('#setup-model'))!.trim(), MODEL, 'the set-up names the ready model')
    const copyCurl = page.locator('button[data-copy="setup-curl"]')
    await copyCurl.click()
    await page.locator('button[data-copy="setup-curl"]:has-text("Copied")').waitFor()
    const curl = await page.evaluate('navigator.clipboard.readText()') as string
    t.ok(curl.startsWith(`curl ${base}/api/v1/chat/completions`) && curl.includes(key) && curl.includes(`"model":"${MODEL}"`), 'the curl snippet\'s copy button copies it with the address, key and model')
    // Not execFileSync: the server answering it runs in this process.
    const pasted = JSON.parse((await promisify(execFile)('bash', ['-c', curl.replace('curl ', 'curl -s ')])).stdout) as { model: string; choices: unknown[] }
    t.equal(pasted.model, MODEL, 'and pasted into a shell it gets a completion')
    t.equal(pasted.choices.length, 1)
    await shot(page, 'dashboard-key-created')

    const client = new OpenAI({ apiKey: key, baseURL: `${base}/api/v1`, maxRetries: 0 })
    const completion = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 12, temperature: 0 })
    t.equal(completion.usage!.completion_tokens, 12)

    await page.goto(`${base}/api`)
    t.notOk((await page.content()).includes(key.slice(15)), 'the key\'s secret is not on the dashboard')
    t.equal((await page.textContent('#keys tbody tr td:nth-child(2)'))!.trim(), `${key.slice(0, 15)}…`, 'listed by prefix')
    t.notMatch(await page.textContent('#keys tbody tr td:nth-child(4)'), /never/, 'with its last-used time')
    t.equal((await page.textContent('#total-calls'))!.trim(), '2', 'the calls (the pasted curl and the SDK\'s) are counted in the usage')
    const row = (await page.textContent('#recent tbody tr'))!.replace(/\s+/g, ' ')
    t.match(row, new RegExp(`${MODEL} ${completion.usage!.prompt_tokens} 12 completed`), 'and listed with its tokens')
    t.match(await page.textContent('#stat-allowance'), /998\s*left of 1,000/, 'the allowance went down by two')
    t.equal(await page.locator('svg.chart rect.bar-calls').count(), 30, 'a bar per day')
    await shot(page, 'dashboard-home-usage')

    await page.click(`button[aria-label="Revoke ${key.slice(0, 15)}"]`)
    t.match(await page.textContent('.notice'), /revoked/)
    t.match(await page.textContent('#keys tbody tr'), /revoked/)
    await shot(page, 'dashboard-key-revoked')
    const refused = await client.models.list().catch((err: unknown) => err)
    t.ok(refused instanceof OpenAI.AuthenticationError, 'the next call fails with 401')
    t.equal((refused as InstanceType<typeof OpenAI.AuthenticationError>).status, 401)

    await page.click('a[href="/api/password"]')
    await shot(page, 'dashboard-password')
  })

  t.test('deleting an account: not sent without the ticked box; then logged out with a notice', async t => {
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 } })
    t.teardown(() => context.close())
    const page = await context.newPage()
    await page.goto(`${base}/api/register`)
    await page.fill('input[name=email]', 'dave@example.com')
    await page.fill('input[name=password]', 'dave password')
    await page.fill('input[name=confirm]', 'dave password')
    await page.click('button[type=submit]')
    await page.goto(`${base}/api/password`)
    await page.click('a[href="/api/delete-account"]')
    await page.fill('input[name=password]', 'dave password')
    await shot(page, 'dashboard-delete-account')
    await page.click('button:has-text("Delete account")')
    t.equal(new URL(page.url()).pathname, '/api/delete-account', 'the browser does not send it while the box is unticked (required)')
    await page.check('input[name=confirm]')
    await page.click('button:has-text("Delete account")')
    t.equal(new URL(page.url()).pathname, '/api/login', 'deleted, and on the log-in page')
    t.match(await page.textContent('.notice'), /The account was deleted/)
    t.notOk((await context.cookies()).some(c => c.name === 'chatd_session'), 'the session cookie is gone')
  })

  t.test('a form posted without its CSRF token is refused', async t => {
    const context = await browser.newContext()
    t.teardown(() => context.close())
    const page = await context.newPage()
    await logIn(page, 'carol@example.com', 'carol password')
    t.equal(new URL(page.url()).pathname, '/api')

    // Strip the token from the real form and submit it: what a forged cross-site form amounts to.
    await page.fill('input[name=name]', 'forged')
    await page.evaluate('document.querySelector(\'form[action="/api/keys"] input[name=_csrf]\').remove()')
    const [response] = await Promise.all([page.waitForNavigation(), page.click('button:has-text("Create key")')])
    t.equal(response!.status(), 403)
    t.match(await page.textContent('h1'), /Form expired/)
    await shot(page, 'dashboard-csrf-refused')

    const direct = await context.request.post(`${base}/api/keys`, { form: { name: 'forged too' } })
    t.equal(direct.status(), 403, 'a post with the session cookie but no token is refused too')
    await page.goto(`${base}/api`)
    t.equal(await page.locator('#keys tbody tr:has-text("forged")').count(), 0, 'no forged key exists')
  })

  t.test('with JavaScript off, log-in and keys still work; the copy button stays hidden', async t => {
    const context = await browser.newContext({ javaScriptEnabled: false })
    t.teardown(() => context.close())
    const page = await context.newPage()
    await logIn(page, 'carol@example.com', 'carol password')
    t.equal(new URL(page.url()).pathname, '/api')
    await page.fill('input[name=name]', 'no-js')
    await page.click('button:has-text("Create key")')
    t.match(await page.textContent('#new-key'), /^sk-chatd-/)
    t.equal(await page.locator('button[data-copy]').count(), 7, 'the key and the six set-up snippets have copy buttons')
    t.equal(await page.locator('button[data-copy]:visible').count(), 0, 'none shows without JavaScript')
  })

  t.test('an admin sets an account\'s tier on the accounts page', async t => {
    const context = await browser.newContext({ viewport: { width: 1100, height: 700 } })
    t.teardown(() => context.close())
    const page = await context.newPage()
    await logIn(page, 'admin@localhost', 'admin password')
    await page.click('a[href="/api/admin"]')
    await page.selectOption('select[aria-label="Tier of carol@example.com"]', 'pro')
    await page.click('tr:has-text("carol@example.com") button:has-text("Save")')
    t.match(await page.textContent('.notice'), /tier was changed/)
    t.equal(await page.locator('select[aria-label="Tier of carol@example.com"]').inputValue(), 'pro')
    await shot(page, 'dashboard-admin')
  })
}
