// npm run docs:config: the settings are documented once, in src/config.ts's
// schema (each variable's default, description and example), and written from
// there into docs/configuration.md's tables (between the config:start and
// config:end markers) and into .env.example, whole. test/docs/config-docs.test.ts
// renders both again and fails when a file differs from what this writes.
//
// The groups below only order the variables and give each group its title and
// a few words; what a variable means lives in the schema. The variables chatd
// itself does not read (models.json's ${UPSTREAM_...}, the compose files' own)
// are described here, since no schema holds them.

import { readFileSync, writeFileSync } from 'node:fs'
import { ConfigSchema } from '../src/config.ts'

const ROOT = new URL('..', import.meta.url).pathname
export const CONFIG_DOC = 'docs/configuration.md'
export const ENV_EXAMPLE = '.env.example'
export const START_MARKER = '<!-- config:start -->'
export const END_MARKER = '<!-- config:end -->'

/** A variable that something other than chatd's config reads; never set in .env.example, only shown. */
interface Extra {
  name: string
  description: string
  /** The value that applies when it is unset (shown in the table and as the commented-out example). */
  default?: string
  example?: string
}

interface Group {
  /** Heading in docs/configuration.md. */
  title: string
  /** The `# --- ... ---` line in .env.example. */
  env: string
  intro?: string
  variables: Array<string | Extra>
}

const GROUPS: Group[] = [
  {
    title: 'Server',
    env: 'server',
    variables: ['PORT', 'HOST', 'LOG_LEVEL', 'BODY_LIMIT', 'MAX_MESSAGES', 'MAX_MESSAGE_CHARS', 'MAX_CONTENT_PARTS', 'SSE_KEEPALIVE_MS', 'SHUTDOWN_GRACE_MS'],
  },
  {
    title: 'Slow clients, connections and refused requests',
    env: 'slow clients, connections and refused requests',
    intro: 'Receiving a request is bounded; answering it is not (a stream may run for minutes).',
    variables: ['HEADERS_TIMEOUT_MS', 'REQUEST_TIMEOUT_MS', 'KEEP_ALIVE_TIMEOUT_MS', 'MAX_CONNECTIONS', 'MAX_CONNECTIONS_PER_ADDRESS', 'JSON_MAX_DEPTH', 'REFUSED_PER_KEY_PER_MINUTE', 'REFUSED_PER_ADDRESS_PER_MINUTE', 'READS_PER_ACCOUNT_PER_MINUTE'],
  },
  {
    title: 'Storage',
    env: 'storage',
    variables: ['DATABASE_URL', 'DATABASE_TIMEOUT_MS', 'USAGE_RECORDS_RETENTION_DAYS'],
  },
  {
    title: 'Stored responses',
    env: 'stored responses (the Responses API)',
    intro: 'Responses created with `store` (the default) are kept per account in the database; see [Stored responses](api.md#stored-responses).',
    variables: ['RESPONSES_RETENTION_DAYS', 'RESPONSES_MAX_PER_ACCOUNT', 'RESPONSES_MAX_BYTES', 'RESPONSES_MAX_CONVERSATION_BYTES'],
  },
  {
    title: 'Accounts',
    env: 'accounts',
    variables: ['CHATD_ADMIN_EMAIL', 'CHATD_ADMIN_KEY', 'REGISTRATION', 'TIERS_FILE', 'LOGIN_ATTEMPTS_PER_MINUTE', 'KEYS_PER_ACCOUNT', 'KEYS_PER_ACCOUNT_PER_DAY', 'COOKIE_SECURE', 'SESSION_SECRET'],
  },
  {
    title: 'Several replicas',
    env: 'several replicas',
    variables: ['REDIS_URL', 'REDIS_PREFIX'],
  },
  {
    title: 'Models',
    env: 'models',
    variables: ['MODELS_FILE', 'ONNX_DEVICE', 'ONNX_THREADS', 'ONNX_WEBGPU_CAPTURE', 'ONNX_WEBGPU_CAPTURE_ROWS', 'MAX_BATCH', 'KV_CACHE_MB', 'PREFIX_CACHE', 'PREFIX_CACHE_MB', 'PREFIX_CACHE_SHARED_PREFIX', 'PREFILL_CHUNK', 'MIXED_BATCHES', 'PROMPT_GRAPH', 'QUEUE_SIZE', 'GRAMMAR_COMPILE_TIMEOUT_MS', 'GRAMMAR_COMPILES_PER_ACCOUNT', 'GRAMMAR_COMPILES_MAX', 'GRAMMAR_WORKER_MEMORY_MB', 'GRAMMAR_WORKERS_MAX'],
  },
  {
    title: 'Upstream models',
    env: 'upstream models',
    intro: 'Any OpenAI-compatible server: vLLM, llama.cpp, Ollama, a hosted API. `UPSTREAM_BASE_URL`, `UPSTREAM_API_KEY` and ' +
      '`UPSTREAM_MODEL` are not chatd settings: the shipped models.json\'s `upstream` entry reads them as `${...}`. While `UPSTREAM_BASE_URL` ' +
      'or `UPSTREAM_MODEL` is unset, that model is listed as unavailable and the others keep working. The timeouts and retries apply to every upstream.',
    variables: [
      { name: 'UPSTREAM_BASE_URL', description: 'The upstream server\'s API root, as OpenAI clients take it.', example: 'http://127.0.0.1:11434/v1' },
      { name: 'UPSTREAM_API_KEY', description: 'Optional (Ollama needs none): sent as `Authorization: Bearer ...`, never logged or shown to clients.' },
      { name: 'UPSTREAM_MODEL', description: 'The model\'s name on the upstream.', example: 'qwen2.5:1.5b' },
      'UPSTREAM_CONNECT_TIMEOUT_MS', 'UPSTREAM_FIRST_BYTE_TIMEOUT_MS', 'UPSTREAM_IDLE_TIMEOUT_MS', 'UPSTREAM_RETRIES',
    ],
  },
  {
    title: 'Web search',
    env: 'web search (googleSearchStatus: true)',
    variables: ['SEARCH_PROVIDER', 'SEARXNG_URL', 'GOOGLE_CSE_KEY', 'GOOGLE_CSE_ID', 'BRAVE_API_KEY', 'SEARCH_RESULTS', 'SEARCH_TIMEOUT_MS', 'SEARCH_CACHE_TTL_MS', 'GOOGLE_CSE_URL', 'BRAVE_SEARCH_URL'],
  },
  {
    title: 'Metrics and traces',
    env: 'metrics and traces',
    intro: 'What `/metrics` exposes and who may read it, and OpenTelemetry traces (off unless an endpoint is set); see [Operations](operations.md).',
    variables: ['METRICS_FAMILY_PREFIX', 'METRICS_ACCOUNTS_TOP', 'METRICS_TOKEN', 'METRICS_PORT', 'METRICS_HOST', 'OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_PROTOCOL', 'OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_SERVICE_NAME', 'OTEL_TRACES_SAMPLER_ARG', 'OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT'],
  },
  {
    title: 'Model download',
    env: 'model download (chatd pull, and chatd serve\'s automatic pull)',
    variables: ['MODELS_DIR', 'CHATD_AUTO_PULL', 'HF_ENDPOINT', 'HF_TOKEN'],
  },
  {
    title: 'Behind a reverse proxy',
    env: 'behind a reverse proxy',
    variables: ['TRUST_PROXY'],
  },
  {
    title: 'Docker compose',
    env: 'docker compose',
    intro: 'Read by the `docker-compose*.yml` files, not by chatd.',
    variables: [
      { name: 'POSTGRES_PASSWORD', description: 'Required for the compose stack: the PostgreSQL password (URL-safe characters, e.g. `openssl rand -hex 24`).' },
      { name: 'CHATD_BIND', description: 'Where chatd\'s port is published on the host: `127.0.0.1` (local only) or `0.0.0.0`.', default: '127.0.0.1' },
      { name: 'CHATD_PORT', description: 'The host port chatd is published on.', default: '8080' },
      { name: 'CHATD_GPU_DEVICE', description: 'With docker-compose.gpu.yml: `ONNX_DEVICE` for the GPU image (`cuda`: a GPU that cannot be used is an error; `webgpu`: the same through onnxruntime\'s WebGPU provider over Vulkan, which needs no CUDA libraries; `auto`: CUDA, then WebGPU, else the CPU).', default: 'cuda' },
      { name: 'CHATD_DOMAIN', description: 'Required with docker-compose.proxy.yml: the public name Caddy gets a TLS certificate for.', example: 'chat.example.com' },
      { name: 'COMPOSE_FILE', description: 'Which compose files `docker compose` uses without `-f`, e.g. the GPU stack behind the proxy.', example: 'docker-compose.yml:docker-compose.gpu.yml:docker-compose.proxy.yml' },
    ],
  },
]

const ENV_HEADER = [
  'chatd reads its settings from environment variables; a .env file in the working directory is read too (real environment variables win). ' +
  'Every value is checked at start-up, and a bad one stops the server with a message naming it.',
  'Generated from src/config.ts by `npm run docs:config` (edit the descriptions there); docs/configuration.md has the same in tables.',
  'Every line is commented out: a copy of this file changes nothing until you uncomment a line, so it is safe whoever reads it: ' +
  'chatd (`npm start`), docker compose (which sets the container\'s own HOST and DATABASE_URL), and `docker run --env-file .env` ' +
  '(whose image sets HOST=0.0.0.0, DATABASE_URL=sqlite:///data/chatd.db and MODELS_DIR=/models; an active HOST=127.0.0.1 would make ' +
  'the container unreachable through -p, and a relative sqlite:// path would point into /app, which the image\'s user (uid 10001) cannot write). ' +
  '`# NAME=value` shows the default; for a variable that is unset by default, an example.',
]

interface Row {
  name: string
  description: string
  /** The value that applies when unset, as shown; undefined: unset. */
  shownDefault?: string
  /** The line in .env.example: `NAME=value`, or commented out. */
  envLine: string
}

interface SchemaProperty { default?: unknown; description?: string; examples?: unknown[] }

function rows (group: Group, properties: Record<string, SchemaProperty>): Row[] {
  return group.variables.map(v => {
    if (typeof v !== 'string') {
      return { name: v.name, description: v.description, shownDefault: v.default, envLine: `# ${v.name}=${v.example ?? v.default ?? ''}` }
    }
    const p = properties[v]
    if (p === undefined) throw new Error(`docs-config: ${v} is in a group but not in src/config.ts's schema`)
    if (!p.description) throw new Error(`docs-config: ${v} has no description in src/config.ts`)
    if (p.default === undefined) {
      const example = p.examples?.[0]
      return { name: v, description: p.description, envLine: `# ${v}=${example === undefined ? '' : String(example)}` }
    }
    // Commented out too: the default applies anyway, and an active line would override the image's own settings.
    return { name: v, description: p.description, shownDefault: String(p.default), envLine: `# ${v}=${String(p.default)}` }
  })
}

/** Every group's rows; throws when a schema variable is in no group, or in two. */
function allRows (): Array<{ group: Group; rows: Row[] }> {
  const properties = ConfigSchema.properties as unknown as Record<string, SchemaProperty>
  const seen = new Map<string, string>()
  const result = GROUPS.map(group => {
    const groupRows = rows(group, properties)
    for (const r of groupRows) {
      if (seen.has(r.name)) throw new Error(`docs-config: ${r.name} is in two groups (${seen.get(r.name)}, ${group.title})`)
      seen.set(r.name, group.title)
    }
    return { group, rows: groupRows }
  })
  const missing = Object.keys(properties).filter(name => !seen.has(name))
  if (missing.length > 0) throw new Error(`docs-config: add ${missing.join(', ')} to a group in scripts/docs-config.ts`)
  return result
}

function cell (text: string): string {
  return text.replace(/\|/g, '\\|')
}

/** The markdown that goes between the markers in docs/configuration.md. */
export function renderConfigTables (): string {
  const out: string[] = []
  for (const { group, rows } of allRows()) {
    out.push(`### ${group.title}`, '')
    if (group.intro) out.push(group.intro, '')
    out.push('| variable | default | meaning |', '|---|---|---|')
    for (const r of rows) {
      const shown = r.shownDefault === undefined ? 'unset' : r.shownDefault === '' ? 'empty' : `\`${r.shownDefault}\``
      out.push(`| \`${r.name}\` | ${cell(shown)} | ${cell(r.description)} |`)
    }
    out.push('')
  }
  return out.join('\n')
}

/** Comment lines of at most `width` characters. */
function comment (text: string, width = 100): string[] {
  const lines: string[] = []
  let line = '#'
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line.length > 1 && line.length + 1 + word.length > width) {
      lines.push(line)
      line = '#'
    }
    line += ` ${word}`
  }
  if (line.length > 1) lines.push(line)
  return lines
}

/** .env.example, whole. */
export function renderEnvExample (): string {
  const out: string[] = ENV_HEADER.flatMap((paragraph, i) => [...(i > 0 ? ['#'] : []), ...comment(paragraph)])
  for (const { group, rows } of allRows()) {
    out.push('', `# --- ${group.env} ---`)
    if (group.intro) out.push(...comment(group.intro), '#')
    for (const r of rows) out.push(...comment(r.description), r.envLine)
  }
  return out.join('\n') + '\n'
}

/** `doc` with the text between the markers replaced by `tables`. */
export function spliceConfigTables (doc: string, tables: string): string {
  const start = doc.indexOf(START_MARKER)
  const end = doc.indexOf(END_MARKER)
  if (start === -1 || end === -1 || end < start) throw new Error(`docs-config: ${CONFIG_DOC} needs ${START_MARKER} and then ${END_MARKER}`)
  return `${doc.slice(0, start + START_MARKER.length)}\n\n${tables}\n${doc.slice(end)}`
}

if (import.meta.main) {
  const docPath = ROOT + CONFIG_DOC
  writeFileSync(docPath, spliceConfigTables(readFileSync(docPath, 'utf8'), renderConfigTables()))
  writeFileSync(ROOT + ENV_EXAMPLE, renderEnvExample())
  console.log(`wrote ${CONFIG_DOC} (between the config markers) and ${ENV_EXAMPLE}`)
}
