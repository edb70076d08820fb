// GET /api/v1/models(/{id}), /healthz, /readyz, /metrics and /docs; what a
// loading or unavailable model answers.

import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config.ts'
import { FILES_MISSING_SUMMARY, ModelRegistry, UnavailableBackend } from '../../src/engine/registry.ts'
import { buildTestApp, chatBody } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

/** The end of every model_out_of_service message. */
const OUT_OF_SERVICE = " It stays so until the server's operator acts: use a model that is ready (the model list says which)."

t.test('model list in the OpenAI shape, with status', async t => {
  let open!: () => void
  const loading = new ScriptedBackend({ id: 'slow', loadGate: new Promise<void>(resolve => { open = resolve }) })
  const missing = new UnavailableBackend('big', 'model files not found at /x', 'run: npx chatd pull big', FILES_MISSING_SUMMARY)
  const { app, auth } = await buildTestApp(t, { backends: [new ScriptedBackend(), loading, missing] })

  const list = await app.inject({ url: '/api/v1/models', headers: auth })
  t.equal(list.statusCode, 200)
  const body = list.json()
  t.equal(body.object, 'list')
  t.same(body.data.map((m: { id: string; status: string }) => [m.id, m.status]), [['scripted', 'ready'], ['slow', 'loading'], ['big', 'unavailable']])
  for (const m of body.data) {
    t.equal(m.object, 'model')
    t.equal(m.owned_by, 'chatd')
    t.ok(Number.isInteger(m.created))
  }
  t.equal(body.data[2].status_reason, 'its files are not on this server yet')

  const one = await app.inject({ url: '/api/v1/models/scripted', headers: auth })
  t.same(one.json(), body.data[0])
  const unknown = await app.inject({ url: '/api/v1/models/nope', headers: auth })
  t.equal(unknown.statusCode, 404)
  t.same(unknown.json().error, { message: "The model 'nope' does not exist.", type: 'not_found_error', param: 'id', code: 'model_not_found' })
  open()
})

t.test('the model list marks models the caller\'s tier may not use', async t => {
  const tiers = JSON.stringify({ default: 'free', tiers: { free: { models: ['scripted', 'small-*'] }, pro: { models: ['*'] } } })
  const backends = [new ScriptedBackend(), new ScriptedBackend({ id: 'small-1' }), new ScriptedBackend({ id: 'big' })]
  const free = await buildTestApp(t, { tier: 'free', tiers, backends })
  const list = (await free.app.inject({ url: '/api/v1/models', headers: free.auth })).json()
  t.same(list.data.map((m: { id: string; allowed: boolean }) => [m.id, m.allowed]), [['scripted', true], ['small-1', true], ['big', false]], 'every model is listed; allowed says which the tier may use')
  t.match((await free.app.inject({ url: '/api/v1/models/big', headers: free.auth })).json(), { id: 'big', status: 'ready', allowed: false })
  // What allowed: false means: the chat endpoint refuses the model for this tier.
  const refused = await free.app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: free.auth, payload: chatBody({ model: 'big' }) })
  t.equal(refused.statusCode, 403)
  t.equal(refused.json().error.code, 'model_not_allowed')

  const pro = await buildTestApp(t, { tier: 'pro', tiers, backends: [new ScriptedBackend(), new ScriptedBackend({ id: 'big' })] })
  t.same((await pro.app.inject({ url: '/api/v1/models', headers: pro.auth })).json().data.map((m: { allowed: boolean }) => m.allowed), [true, true])
})

t.test('unknown, loading and unavailable models on the chat endpoint', async t => {
  let open!: () => void
  const loading = new ScriptedBackend({ id: 'slow', loadGate: new Promise<void>(resolve => { open = resolve }) })
  const missing = new UnavailableBackend('big', 'model files not found at /x', 'run: npx chatd pull big', FILES_MISSING_SUMMARY)
  const { app, auth, models } = await buildTestApp(t, { backends: [new ScriptedBackend(), loading, missing] })
  const ask = (model: string) => app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ model }) })

  const unknown = await ask('nope')
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().error.code, 'model_not_found')
  t.equal(unknown.json().error.type, 'not_found_error')
  t.equal(unknown.json().error.param, 'model')

  const notYet = await ask('slow')
  t.equal(notYet.statusCode, 503)
  t.equal(notYet.json().error.code, 'model_unavailable')
  t.equal(notYet.headers['retry-after'], '5')

  // Not coming back without the operator: a 4xx, which no client retries.
  const gone = await ask('big')
  t.equal(gone.statusCode, 400)
  t.same(gone.json().error, { message: `The model 'big' is out of service: its files are not on this server yet.${OUT_OF_SERVICE}`, type: 'invalid_request_error', param: 'model', code: 'model_out_of_service' })
  t.equal(gone.headers['retry-after'], undefined, 'nothing to come back for')

  t.equal((await ask('scripted')).statusCode, 200, 'the other models keep working')

  const loaded = models.loadAll()
  open()
  await loaded
  t.equal((await ask('slow')).statusCode, 200, 'answers once loaded')
})

t.test('an ordinary key is told why a model is unavailable without the server\'s paths or commands; an admin key gets them', async t => {
  const dir = t.testdir()
  const modelsFile = join(dir, 'models.json')
  writeFileSync(modelsFile, JSON.stringify({
    models: [
      { id: 'absent', backend: 'onnx', path: 'models/absent', hubRepo: 'org/absent' },
      { id: 'bare', backend: 'onnx', path: join(dir, 'elsewhere', 'bare') },
      { id: 'upstream', backend: 'openai', baseUrl: '${SECRET_UPSTREAM_URL}', upstreamModel: 'm' },
    ],
  }))
  const config = loadConfig({ DATABASE_URL: 'sqlite://unused.db' })
  const registry = await ModelRegistry.fromFile(modelsFile, { config, env: {} })
  const { app, auth, accounts } = await buildTestApp(t, { backends: registry.list().map(m => m.backend) })
  const admin = await accounts.create({ email: 'ops@example.com', isAdmin: true })
  const adminAuth = { authorization: `Bearer ${(await accounts.createKey(admin.id)).key}` }

  const views = async (headers: Record<string, string>) => [
    (await app.inject({ url: '/api/v1/models', headers })).body,
    ...await Promise.all(['absent', 'bare', 'upstream'].map(async id => (await app.inject({ url: `/api/v1/models/${id}`, headers })).body)),
    ...await Promise.all(['absent', 'bare', 'upstream'].flatMap(model => [false, true].map(async stream =>
      (await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers, payload: chatBody({ model, stream }) })).body))),
  ]
  for (const body of await views(auth)) {
    t.notMatch(body, dir, 'no server path for an ordinary key')
    t.notMatch(body, /(^|[\s'"(])\/[\w.-]+\//, 'no absolute path of any kind')
    t.notMatch(body, /npx|chatd pull|hubRepo|models\.json|SECRET_UPSTREAM_URL|\.env/, 'no operator command, file or setting')
  }
  const list = (await app.inject({ url: '/api/v1/models', headers: auth })).json().data
  t.same(list.map((m: { id: string; status_reason: string }) => [m.id, m.status_reason]), [
    ['absent', 'its files are not on this server yet'],
    ['bare', 'its files are not on this server yet'],
    ['upstream', 'its configuration on this server is incomplete'],
  ], 'a short reason each')
  const refused = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ model: 'absent' }) })
  t.same(refused.json().error, { message: `The model 'absent' is out of service: its files are not on this server yet.${OUT_OF_SERVICE}`, type: 'invalid_request_error', param: 'model', code: 'model_out_of_service' })

  const forAdmin = (await app.inject({ url: '/api/v1/models', headers: adminAuth })).json().data
  t.equal(forAdmin[0].status_reason, `model files not found at ${join(dir, 'models', 'absent')} (run: npx chatd pull absent)`, 'the admin sees where and what to run')
  t.match(forAdmin[1].status_reason, `at ${join(dir, 'elsewhere', 'bare')}`)
  t.equal(forAdmin[2].status_reason, 'environment variable SECRET_UPSTREAM_URL not set (set SECRET_UPSTREAM_URL in the environment or .env)')
  const adminRefused = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: adminAuth, payload: chatBody({ model: 'absent' }) })
  t.equal(adminRefused.json().error.message, `The model 'absent' is out of service: model files not found at ${join(dir, 'models', 'absent')} (run: npx chatd pull absent).${OUT_OF_SERVICE}`)
})

t.test('healthz and readyz', async t => {
  let open!: () => void
  const loading = new ScriptedBackend({ id: 'slow', loadGate: new Promise<void>(resolve => { open = resolve }) })
  const missing = new UnavailableBackend('big', 'files missing')
  const { app, models } = await buildTestApp(t, { backends: [new ScriptedBackend(), loading, missing] })

  t.same((await app.inject({ url: '/healthz' })).json(), { status: 'ok' })
  const before = await app.inject({ url: '/readyz' })
  t.equal(before.statusCode, 503, 'not ready while a model loads')
  t.same(before.json(), { status: 'loading', models: { scripted: 'ready', slow: 'loading', big: 'unavailable' } })

  const loaded = models.loadAll()
  open()
  await loaded
  const after = await app.inject({ url: '/readyz' })
  t.equal(after.statusCode, 200, 'ready: unavailable models do not hold readiness back')
  t.same(after.json(), { status: 'ready', models: { scripted: 'ready', slow: 'ready', big: 'unavailable' } })
})

t.test('readyz: 503 when no model can answer, 200 when one of two can', async t => {
  const none = await buildTestApp(t, { backends: [new UnavailableBackend('a', 'files missing'), new UnavailableBackend('b', 'environment variable X not set')] })
  await none.models.loadAll()
  const unusable = await none.app.inject({ url: '/readyz' })
  t.equal(unusable.statusCode, 503, 'no usable model: not ready')
  t.same(unusable.json(), { status: 'unavailable', models: { a: 'unavailable', b: 'unavailable' } })

  const failedDownload = Promise.reject(new Error('download failed: could not reach the Hugging Face Hub'))
  failedDownload.catch(() => {})
  const one = await buildTestApp(t, { backends: [new ScriptedBackend({ id: 'pulled', loadGate: failedDownload }), new ScriptedBackend({ id: 'usable' })] })
  await one.models.loadAll()
  const res = await one.app.inject({ url: '/readyz' })
  t.equal(res.statusCode, 200, 'one usable model of two: ready')
  t.same(res.json(), { status: 'ready', models: { pulled: 'unavailable', usable: 'ready' } })

  const empty = await buildTestApp(t, { backends: [] })
  t.equal((await empty.app.inject({ url: '/readyz' })).statusCode, 503, 'no model at all: not ready')
})

t.test('a model whose load fails becomes unavailable', async t => {
  const failedLoad = Promise.reject(new Error('bad weights'))
  failedLoad.catch(() => {})
  const broken = new ScriptedBackend({ id: 'broken', loadGate: failedLoad })
  const { app, auth, models } = await buildTestApp(t, { backends: [broken] })
  await models.loadAll()
  t.same(models.state('broken'), { state: 'unavailable', reason: 'loading failed: bad weights', summary: 'it failed to load' })
  const readyz = await app.inject({ url: '/readyz' })
  t.equal(readyz.statusCode, 503, 'no model can answer: not ready')
  t.same(readyz.json(), { status: 'unavailable', models: { broken: 'unavailable' } })
  const res = await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ model: 'broken' }) })
  t.equal(res.statusCode, 400, 'a load that failed stays failed: a status no client retries')
  t.equal(res.json().error.message, `The model 'broken' is out of service: it failed to load.${OUT_OF_SERVICE}`, 'an ordinary key: the short reason')
})

t.test('metrics', async t => {
  const { app, auth } = await buildTestApp(t)
  await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody() })
  await app.inject({ method: 'POST', url: '/api/v1/chat/completions', headers: auth, payload: chatBody({ temperature: 9 }) })
  await app.inject({ method: 'POST', url: '/api/v1/chat/completions', payload: chatBody() })
  const res = await app.inject({ url: '/metrics' })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain/)
  const text = res.body
  t.match(text, 'chatd_http_requests_total{route="/api/v1/chat/completions",method="POST",status="200"} 1')
  t.match(text, 'chatd_http_requests_total{route="/api/v1/chat/completions",method="POST",status="400"} 1')
  t.match(text, 'chatd_errors_total{code="invalid_parameter"} 1')
  t.match(text, 'chatd_errors_total{code="missing_api_key"} 1')
  t.match(text, 'chatd_time_to_first_token_seconds_count{model="scripted"} 1')
  t.match(text, 'chatd_generated_tokens_total{model="scripted"} 4')
  t.match(text, 'chatd_active_requests{model="scripted"} 0')
  t.match(text, 'chatd_queue_length{model="scripted"} 0')
  t.match(text, 'chatd_completions_total{model="scripted",finish_reason="stop"} 1')
  t.match(text, 'chatd_process_cpu_seconds_total')
})

t.test('OpenAPI docs are generated from the schemas', async t => {
  const { app } = await buildTestApp(t)
  const ui = await app.inject({ url: '/docs/' })
  t.equal(ui.statusCode, 200)
  t.match(ui.headers['content-type'], /text\/html/)
  const json = await app.inject({ url: '/docs/json' })
  t.match(json.headers['content-type'], /^application\/json/)
  const spec = json.json()
  t.equal(spec.openapi, '3.1.0')
  t.same(spec, app.swagger(), 'the document the routes make')
  t.equal((await app.inject({ url: '/docs/json' })).body, json.body, 'the same text on every request')
  const chat = spec.paths['/api/v1/chat/completions'].post
  const request = chat.requestBody.content['application/json'].schema
  t.same(request.required, ['model', 'messages'])
  t.same(request.properties.temperature, { type: 'number', minimum: 0, maximum: 2, default: 1, description: '0 is greedy decoding.' })
  t.equal(request.properties.top_k.type, 'integer')
  t.ok(chat.responses['200'].content['text/event-stream'], 'the stream chunk is documented')
  t.ok(chat.responses['4XX'] ?? chat.responses['4xx'], 'the error body is documented')
  t.ok(spec.paths['/api/v1/models/{id}'])
  t.ok(spec.components.securitySchemes.bearerAuth)
})

t.test('unknown routes get the error body', async t => {
  const { app } = await buildTestApp(t)
  const res = await app.inject({ url: '/nope' })
  t.equal(res.statusCode, 404)
  t.equal(res.json().error.code, 'not_found')
})

t.test('the device a local model runs on, and why, is told to admin accounts only', async t => {
  const local = Object.assign(new ScriptedBackend({ id: 'local' }), { device: 'webgpu', deviceWhy: 'asked for (ONNX_DEVICE=webgpu)', cacheOnDevice: true })
  const { app, auth, accounts } = await buildTestApp(t, { backends: [local, new ScriptedBackend()] })
  const admin = await accounts.create({ email: 'ops@example.com', isAdmin: true })
  const adminAuth = { authorization: `Bearer ${(await accounts.createKey(admin.id)).key}` }
  const ordinary = (await app.inject({ url: '/api/v1/models/local', headers: auth })).json()
  t.notOk('device' in ordinary || 'device_reason' in ordinary || 'cache_on_device' in ordinary, 'an ordinary key is not told')
  const forAdmin = (await app.inject({ url: '/api/v1/models', headers: adminAuth })).json().data
  t.match(forAdmin[0], { id: 'local', device: 'webgpu', device_reason: 'asked for (ONNX_DEVICE=webgpu)', cache_on_device: true })
  t.notOk('device' in forAdmin[1], 'a backend without a device has none')
})
