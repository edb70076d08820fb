// chatd in front of an upstream model, as the upstream tests build it: either a
// test app whose one model, "relay", is an UpstreamBackend pointed at a scripted
// loopback server (relayApp), or a whole server whose models.json names a real
// upstream (relayServer); plus the backend alone on a scripted server, drained.
import { writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { Test } from 'tap'
import OpenAI from 'openai'
import type { FastifyInstance } from 'fastify'
import { loadConfig } from '../../src/config.ts'
import { startServer } from '../../src/server.ts'
import type { GenerateEvent, GenerateRequest } from '../../src/engine/backend.ts'
import { UpstreamBackend, type UpstreamBackendOptions } from '../../src/engine/upstream/backend.ts'
import { buildTestApp } from '../helpers/app.ts'
import { loopbackServer, type Handler, type Loopback } from './loopback.ts'

/** The upstream API's settings for backendOn: quick to give up, one retry. */
const QUICK = { connectTimeoutMs: 2000, firstByteTimeoutMs: 2000, idleTimeoutMs: 2000, retries: 1 }

/**
 * A listening test app (helpers/app.ts) whose one model, "relay", is an UpstreamBackend on
 * `<loopback>/v1` answered by `handler`; `opts` overrides the backend's options (api, apiKey,
 * settings...). `client` is the openai SDK pointed at the app with the test account's key.
 */
export async function relayApp (t: Test, handler: Handler, opts: Partial<UpstreamBackendOptions> = {}) {
  const upstream = await loopbackServer(t, handler)
  const backend = new UpstreamBackend({ id: 'relay', baseUrl: `${upstream.url}/v1`, upstreamModel: 'upstream-model', ...opts })
  t.teardown(() => backend.close())
  const test = await buildTestApp(t, { backends: [backend] })
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as AddressInfo
  const client = new OpenAI({ apiKey: test.key, baseURL: `http://127.0.0.1:${port}/api/v1`, maxRetries: 0 })
  return { ...test, upstream, backend, client }
}

/** The JSON body of the upstream's `i`-th request (the last by default). */
export const sentBody = (upstream: Loopback, i = -1) => JSON.parse(upstream.requests.at(i)!.body) as Record<string, any>

/** An UpstreamBackend speaking `api` to a scripted server at its root, with quick time limits. */
export async function backendOn (t: Test, api: UpstreamBackendOptions['api'], handler: Handler, opts: Partial<UpstreamBackendOptions> = {}) {
  const up = await loopbackServer(t, handler)
  const backend = new UpstreamBackend({ id: 'relay', api, baseUrl: up.url, upstreamModel: 'm', settings: QUICK, ...opts })
  t.teardown(() => backend.close())
  return { up, backend }
}

const never = new AbortController().signal

/** Every event of one greedy generation by `backend` ("Hi" unless `request` says otherwise). */
export async function generate (backend: UpstreamBackend, request: Partial<GenerateRequest> = {}): Promise<GenerateEvent[]> {
  const out: GenerateEvent[] = []
  for await (const event of backend.generate({ messages: [{ role: 'user', content: 'Hi' }], temperature: 0, topP: 1, topK: 0, stop: [], ...request }, never)) out.push(event)
  return out
}

/**
 * A whole chatd (startServer on a SQLite file in `t`'s test folder) whose models.json names
 * one model, "relay": `upstreamModel` of the chatd at `upstreamUrl`, spoken to over `api`.
 * `adminKey` is its admin's key, which `client` uses.
 */
export async function relayServer (t: Test, opts: { api: UpstreamBackendOptions['api']; upstreamUrl: string; upstreamKey: string; upstreamModel: string; adminKey: string }): Promise<{ app: FastifyInstance; client: OpenAI; url: string }> {
  const dir = t.testdir()
  const file = join(dir, 'models.json')
  writeFileSync(file, JSON.stringify({ models: [{ id: 'relay', backend: 'openai', api: opts.api, baseUrl: `${opts.upstreamUrl}/api/v1`, apiKey: opts.upstreamKey, upstreamModel: opts.upstreamModel }] }))
  const app = await startServer(loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${join(dir, 'relay.db')}`, MODELS_FILE: file, CHATD_ADMIN_KEY: opts.adminKey, CHATD_AUTO_PULL: '0' }), { print: () => {}, logger: false, env: {} })
  t.teardown(() => app.close())
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  return { app, url, client: new OpenAI({ apiKey: opts.adminKey, baseURL: `${url}/api/v1`, maxRetries: 0 }) }
}
