// Configuration: defaults, and a clear message naming each bad variable.

import t from 'tap'
import { ConfigError, DEFAULT_MODELS_FILE, DEFAULT_TIERS_FILE, loadConfig, parseDatabaseUrl } from '../../src/config.ts'

t.test('defaults', async t => {
  // match, not same: each feature's settings add fields, checked in that feature's tests.
  t.match(loadConfig({}), {
    port: 8080,
    host: '127.0.0.1',
    database: { kind: 'sqlite', path: 'data/chatd.db' },
    modelsFile: DEFAULT_MODELS_FILE,
    tiersFile: DEFAULT_TIERS_FILE,
    logLevel: 'info',
    adminKey: undefined,
    adminEmail: 'admin@localhost',
    onnxDevice: 'auto',
    onnxThreads: 0,
    queueSize: 64,
    bodyLimit: 1048576,
    sseKeepAliveMs: 15000,
    shutdownGraceMs: 30000,
  })
})

t.test('values are parsed and typed', async t => {
  const c = loadConfig({ PORT: '3000', HOST: '0.0.0.0', DATABASE_URL: 'sqlite:///var/lib/chatd/db.sqlite', ONNX_THREADS: '4', ONNX_DEVICE: 'cpu', LOG_LEVEL: 'debug', CHATD_ADMIN_KEY: 'sk-chatd-' + 'a1'.repeat(16) })
  t.equal(c.port, 3000)
  t.same(c.database, { kind: 'sqlite', path: '/var/lib/chatd/db.sqlite' })
  t.equal(c.onnxThreads, 4)
  t.equal(c.adminKey, 'sk-chatd-' + 'a1'.repeat(16))
})

t.test('DATABASE_URL: the path is everything after sqlite://', async t => {
  t.same(parseDatabaseUrl('sqlite://data/chatd.db'), { kind: 'sqlite', path: 'data/chatd.db' })
  t.same(parseDatabaseUrl('sqlite:///abs/x.db'), { kind: 'sqlite', path: '/abs/x.db' })
  t.same(parseDatabaseUrl('sqlite://./rel.db'), { kind: 'sqlite', path: './rel.db' })
  t.same(parseDatabaseUrl('postgres://u:p@h/db'), { kind: 'postgres', url: 'postgres://u:p@h/db' })
})

t.test('bad values stop with a message naming each variable', async t => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PORT: 'abc' }, /PORT: must be a whole number \(got "abc"\)/],
    [{ PORT: '70000' }, /PORT: must be <= 65535/],
    [{ LOG_LEVEL: 'loud' }, /LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent \(got "loud"\)/],
    [{ SEARCH_PROVIDER: 'bing' }, /^Invalid configuration:\n {2}SEARCH_PROVIDER: must be one of empty \(none\), searxng, google, brave \(got "bing"\)$/],
    [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL: must be sqlite:\/\/<path> or postgres:\/\/user:password@host:5432\/database$/],
    [{ TRUST_PROXY: 'x y' }, /TRUST_PROXY: must be true, false, a number of proxies, or addresses and CIDR ranges separated by commas \(got "x y"\)/],
    [{ HF_ENDPOINT: 'nope' }, /HF_ENDPOINT: must be an http:\/\/ or https:\/\/ URL \(got "nope"\)/],
    [{ REDIS_URL: 'tcp://r' }, /REDIS_URL: must be a redis:\/\/ or rediss:\/\/ URL$/],
    [{ HOST: '' }, /HOST: must not be empty/],
    [{ DATABASE_URL: 'sqlite://' }, /DATABASE_URL/],
    [{ ONNX_DEVICE: 'tpu' }, /ONNX_DEVICE/],
    [{ QUEUE_SIZE: '0' }, /QUEUE_SIZE: must be >= 1/],
  ]
  for (const [env, message] of cases) {
    t.throws(() => loadConfig(env), { name: 'ConfigError', message }, JSON.stringify(env))
  }
  const err = t.throws(() => loadConfig({ CHATD_ADMIN_KEY: 'sk-chatd-tooshort' })) as ConfigError
  t.match(err.message, /CHATD_ADMIN_KEY: must be sk-chatd- followed by 32 letters or digits/)
  t.notMatch(err.message, 'tooshort', 'secrets are not echoed')

  // No setting's error shows a raw regular expression or a stray comma.
  for (const env of [{ DATABASE_URL: 'x' }, { CHATD_ADMIN_KEY: 'x' }, { REDIS_URL: 'x' }, { SEARXNG_URL: 'x' }, { GOOGLE_CSE_URL: 'x' }, { BRAVE_SEARCH_URL: 'x' }, { HF_ENDPOINT: 'x' }, { TRUST_PROXY: 'x y' }, { SEARCH_PROVIDER: 'x' }]) {
    const e = t.throws(() => loadConfig(env)) as ConfigError
    t.notMatch(e.message, /pattern|\^|\$\)|\(\?|\[|, ,|values ,/, JSON.stringify(env))
  }

  const several = t.throws(() => loadConfig({ PORT: 'x', ONNX_THREADS: '-1' })) as ConfigError
  t.match(several.message, /PORT/)
  t.match(several.message, /ONNX_THREADS/)
})

t.test('.env is read, and real environment variables win', async t => {
  const dir = t.testdir({ '.env': 'PORT=1234\nHOST=0.0.0.0\n' })
  const cwd = process.cwd()
  process.chdir(dir)
  t.teardown(() => process.chdir(cwd))
  const c = loadConfig({ HOST: '127.0.0.2' }, { dotenv: true })
  t.equal(c.port, 1234)
  t.equal(c.host, '127.0.0.2')
})

t.test('slow clients, connections and refused requests (issue 19): defaults, values, and the one rule between them', async t => {
  t.match(loadConfig({}), {
    connections: { headersTimeoutMs: 10000, requestTimeoutMs: 30000, keepAliveTimeoutMs: 72000, maxConnections: 10000, maxConnectionsPerAddress: 256 },
    jsonMaxDepth: 64,
    refusedPerMinute: { key: 30, address: 60 },
  })
  t.match(loadConfig({ HEADERS_TIMEOUT_MS: '500', REQUEST_TIMEOUT_MS: '500', MAX_CONNECTIONS: '0', REFUSED_PER_KEY_PER_MINUTE: '0', JSON_MAX_DEPTH: '8' }), {
    connections: { headersTimeoutMs: 500, requestTimeoutMs: 500, maxConnections: 0 },
    jsonMaxDepth: 8,
    refusedPerMinute: { key: 0, address: 60 },
  })
  t.throws(() => loadConfig({ HEADERS_TIMEOUT_MS: '40000' }), { name: 'ConfigError', message: /HEADERS_TIMEOUT_MS: must be at most REQUEST_TIMEOUT_MS \(30000\) \(got 40000\)/ })
  const err = t.throws(() => loadConfig({ REQUEST_TIMEOUT_MS: '5', JSON_MAX_DEPTH: '0', MAX_CONNECTIONS_PER_ADDRESS: '-1' })) as Error
  t.match(err.message, /REQUEST_TIMEOUT_MS: must be >= 100 \(got "5"\)/)
  t.match(err.message, /JSON_MAX_DEPTH: must be >= 1 \(got "0"\)/)
  t.match(err.message, /MAX_CONNECTIONS_PER_ADDRESS: must be >= 0 \(got "-1"\)/)
})

t.test('.env variables reach config.env (what models.json\'s ${VAR}s read), real ones winning', async t => {
  const dir = t.testdir({ '.env': 'UPSTREAM_BASE_URL=http://from-dotenv/v1\nUPSTREAM_MODEL=dotenv-model\n' })
  const cwd = process.cwd()
  process.chdir(dir)
  t.teardown(() => process.chdir(cwd))
  const c = loadConfig({ UPSTREAM_BASE_URL: 'http://from-env/v1' }, { dotenv: true })
  t.equal(c.env.UPSTREAM_BASE_URL, 'http://from-env/v1')
  t.equal(c.env.UPSTREAM_MODEL, 'dotenv-model')
  t.equal(loadConfig({}).env.UPSTREAM_MODEL, undefined, 'without dotenv, .env is not read')
})
