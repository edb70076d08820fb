// Measures what the three hostile response_format schemas get and how long
// another account's 2-token completion takes while each compiles, on the
// real server with stories260k: node scripts/grammar-hostile.ts
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Accounts } from '../src/accounts/accounts.ts'
import { loadConfig } from '../src/config.ts'
import { startServer } from '../src/server.ts'
import { openMigratedDatabase } from '../src/store/database.ts'
import { anyOfChain, NESTED_PATTERN, refChain } from '../test/helpers/hostile-schemas.ts'
import { storiesModelDir } from '../test/helpers/models.ts'
import { writeFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'

const KEY = `sk-chatd-${'measureH'.repeat(4)}`
const dir = mkdtempSync(join(tmpdir(), 'chatd-hostile-'))
writeFileSync(join(dir, 'models.json'), JSON.stringify({ models: [{ id: 'stories260k', backend: 'onnx', path: storiesModelDir(), dtype: 'fp32', device: 'cpu' }] }))
const database = { kind: 'sqlite' as const, path: join(dir, 'chatd.db') }
const app = await startServer(loadConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: `sqlite://${database.path}`, MODELS_FILE: join(dir, 'models.json'), CHATD_ADMIN_KEY: KEY, CHATD_AUTO_PULL: '0', TIERS_FILE: join(process.cwd(), 'tiers.json') }), { print: () => {}, logger: false })
while ((await app.inject({ url: '/readyz' })).statusCode !== 200) await new Promise(resolve => setTimeout(resolve, 20))
const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
const db = await openMigratedDatabase(database)
const accounts = new Accounts(db)
const bystander = (await accounts.createKey((await accounts.create({ email: 'bystander@example.com', tier: 'unlimited' })).id)).key

const post = (key: string, body: Record<string, unknown>) => fetch(`${url}/api/v1/chat/completions`, {
  method: 'POST',
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, ...body }),
})
const inFlight = async (): Promise<number> => Number((await app.inject({ url: '/metrics' })).body.split('\n').find(l => l.startsWith('chatd_grammar_compiles_in_flight{'))?.split(' ').pop() ?? 0)

await post(bystander, { max_tokens: 2 }) // warm
const alone = performance.now()
await post(bystander, { max_tokens: 2 })
console.log(`bystander's 2-token completion alone: ${(performance.now() - alone).toFixed(0)} ms`)
for (const [name, schema] of [['200-level $ref chain', refChain(200)], ['nested pattern', NESTED_PATTERN], ['70-level anyOf chain', anyOfChain(70)]] as const) {
  const started = performance.now()
  const hostile = post(KEY, { max_tokens: 5, response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } })
    .then(async res => ({ status: res.status, code: ((await res.json()) as { error?: { code: string } }).error?.code, ms: performance.now() - started }))
  const state = { settled: false }
  void hostile.then(() => { state.settled = true })
  // The compile has started once it is in flight (or already over, for a schema that fails at once).
  while (!state.settled && await inFlight() === 0) await new Promise(resolve => setTimeout(resolve, 5))
  const during = !state.settled
  const b0 = performance.now()
  const res = await post(bystander, { max_tokens: 2 })
  const bystanderMs = performance.now() - b0
  const h = await hostile
  console.log(`${name}: caller got ${h.status} ${h.code} after ${h.ms.toFixed(0)} ms; bystander's 2-token completion ${res.status} in ${bystanderMs.toFixed(0)} ms (${during ? 'started while the compile ran' : 'the compile had already ended'})`)
}
await db.destroy()
await app.close()
rmSync(dir, { recursive: true, force: true })
