// The dashboard's users for the security tests: a browser (cookie jar and
// CSRF token, test/dashboard/jar.ts) per person, signed up, logged in, and
// holding keys made the way a person makes them, on the dashboard.

import type { FastifyInstance } from 'fastify'
import { Browser } from '../dashboard/jar.ts'

/** A browser that registered `email` and is logged in as it. */
export async function signedUp (app: FastifyInstance, email: string, password: string): Promise<Browser> {
  const browser = new Browser(app)
  const res = await browser.post('/api/register', { email, password, confirm: password }, { csrfFrom: '/api/register' })
  if (res.statusCode !== 303) throw new Error(`registering ${email} failed: ${res.statusCode} ${res.body}`)
  return browser
}

/** A fresh browser logged in as `email`. */
export async function loggedIn (app: FastifyInstance, email: string, password: string): Promise<Browser> {
  const browser = new Browser(app)
  const res = await browser.post('/api/login', { email, password }, { csrfFrom: '/api/login' })
  if (res.statusCode !== 303) throw new Error(`logging in as ${email} failed: ${res.statusCode}`)
  return browser
}

/** Creates a key on the dashboard and returns it as the one page that shows it does. */
export async function dashboardKey (browser: Browser, name: string): Promise<string> {
  const res = await browser.post('/api/keys', { name }, { csrfFrom: '/api' })
  const key = /<code id="new-key" class="key">(sk-chatd-[A-Za-z0-9]{32})<\/code>/.exec(res.body)?.[1]
  if (res.statusCode !== 201 || !key) throw new Error(`creating a key failed: ${res.statusCode}`)
  return key
}

/** The browser's cookies as a Cookie header. */
export function cookieHeader (browser: Browser): string {
  return [...browser.cookies].map(([name, value]) => `${name}=${value}`).join('; ')
}
