// Every setting is an environment variable, validated once at boot. A bad value
// stops the process with a message that names the variable; nothing downstream
// re-reads process.env. Each variable's description below is its documentation
// (docs/configuration.md and .env.example are generated from it).

import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseEnv } from 'node:util'
import envSchema from 'env-schema'
import { Type, type Static } from 'typebox'
import { DEFAULT_SCHEDULER } from './engine/onnx/scheduler/scheduler-settings.ts'
import type { UpstreamSettings } from './engine/upstream/settings.ts'
import type { SearchSettings } from './search/web-search.ts'

/** chatd's own directory: where the default models.json and tiers.json live, whatever the working directory. */
export const PROJECT_ROOT = fileURLToPath(new URL('..', import.meta.url))

/** Defaults for the files chatd ships; an explicitly set relative path is taken from the working directory instead. */
export const DEFAULT_MODELS_FILE = join(PROJECT_ROOT, 'models', 'models.json')
export const DEFAULT_TIERS_FILE = join(PROJECT_ROOT, 'tiers.json')

/**
 * Size limits on a chat request's conversation beyond BODY_LIMIT (api/pipeline/input-limits.ts
 * enforces them): BODY_LIMIT bounds bytes, not work.
 */
export interface InputLimits {
  /** Messages per request (MAX_MESSAGES). */
  maxMessages: number
  /** Characters (Unicode code points) per message, its parts joined (MAX_MESSAGE_CHARS). */
  maxMessageChars: number
  /** Text parts per message when content is an array (MAX_CONTENT_PARTS). */
  maxContentParts: number
}

export const DEFAULT_INPUT_LIMITS: InputLimits = {
  // Long chats run to a few hundred turns; 1024 leaves room for them and keeps
  // the per-message work (shaping, the template) of one request small.
  maxMessages: 1024,
  // 256 Ki characters: about 65k tokens of English, a long document pasted
  // whole; an unbroken string that long takes the tokenizer a few seconds.
  maxMessageChars: 262144,
  // Clients send one part, or a few; parts are joined into one text.
  maxContentParts: 256,
}

/** How the Responses API's stored responses are bounded (responses/stored-responses.ts, responses/retention.ts). */
export interface StoredResponseLimits {
  /** RESPONSES_RETENTION_DAYS; 0: kept until deleted or evicted. */
  retentionDays: number
  /** RESPONSES_MAX_PER_ACCOUNT; past it the account's oldest are evicted; 0: nothing is stored. */
  maxPerAccount: number
  /** RESPONSES_MAX_BYTES: a larger response (with its input) is not stored. */
  maxBytes: number
  /** RESPONSES_MAX_CONVERSATION_BYTES: the most a conversation read back may hold. */
  maxConversationBytes: number
}

/** What an account may create through the dashboard (KEYS_PER_ACCOUNT, KEYS_PER_ACCOUNT_PER_DAY; accounts/accounts.ts checks it). */
export interface KeyAllowance {
  /** Active keys it may hold. */
  active: number
  /** Keys it may create in 24 hours, revoked ones included. */
  perDay: number
}

/** KEYS_PER_ACCOUNT and KEYS_PER_ACCOUNT_PER_DAY when unset. */
export const DEFAULT_KEY_ALLOWANCE: KeyAllowance = { active: 100, perDay: 100 }

export const DEFAULT_STORED_RESPONSE_LIMITS: StoredResponseLimits = {
  retentionDays: 30,
  maxPerAccount: 10_000,
  maxBytes: 4 * 2 ** 20,
  maxConversationBytes: 16 * 2 ** 20,
}

/** METRICS_FAMILY_PREFIX's values: vLLM's own prefix, or chatd's with vLLM's suffixes (api/metrics/serving.ts). */
export const FAMILY_PREFIXES = ['vllm:', 'chatd:'] as const
export type FamilyPrefix = typeof FAMILY_PREFIXES[number]

/** The most accounts METRICS_ACCOUNTS_TOP may give series of their own (api/metrics/accounts.ts). */
export const ACCOUNTS_TOP_MAX = 200

/** Where traces go and what they hold (OTEL_*; api/tracing/tracing.ts). */
export interface TracingSettings {
  /** The OTLP/HTTP traces URL spans are sent to. */
  url: string
  /** Headers sent with every export (a collector's key): secret, never logged. */
  headers: Record<string, string>
  serviceName: string
  /** Share of requests without a traceparent that are traced, 0 to 1. */
  sampleRatio: number
  /** Prompts and outputs into the model spans (gen_ai.input.messages, gen_ai.output.messages). */
  captureContent: boolean
  /** Longest wait before finished spans are sent (ms); the SDK's 5 s when absent. */
  exportDelayMs?: number
}

/**
 * Every setting chatd reads. Each property's `description` is its documentation:
 * `npm run docs:config` (scripts/docs-config.ts) writes docs/configuration.md's
 * tables and .env.example from it, and a test fails when they drift apart.
 * `examples` gives the value .env.example shows, commented out, for a variable
 * without a default.
 */
export const ConfigSchema = Type.Object({
  // --- server ---
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080, description: 'TCP port to listen on (0 = any free port).' }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Interface to bind: `127.0.0.1` keeps chatd local; `0.0.0.0` listens on all interfaces (as in containers).' }),
  LOG_LEVEL: Type.Enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], { default: 'info', description: 'Logging: `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`. API keys and cookies are always redacted.' }),
  BODY_LIMIT: Type.Integer({ minimum: 1024, default: 1048576, description: 'Largest accepted request body in bytes; a larger one gets 413 `request_too_large`.' }),
  MAX_MESSAGES: Type.Integer({ minimum: 1, default: DEFAULT_INPUT_LIMITS.maxMessages, description: 'Messages per chat completion request; more gets 400 `invalid_parameter` (param `messages`).' }),
  MAX_MESSAGE_CHARS: Type.Integer({ minimum: 1, default: DEFAULT_INPUT_LIMITS.maxMessageChars, description: 'Characters per message (Unicode code points, its text parts joined); more gets 400 `invalid_parameter` (param `messages[i].content`).' }),
  MAX_CONTENT_PARTS: Type.Integer({ minimum: 1, default: DEFAULT_INPUT_LIMITS.maxContentParts, description: 'Text parts per message when `content` is an array of `{"type":"text"}` parts; more gets 400 `invalid_parameter` (param `messages[i].content`).' }),
  SSE_KEEPALIVE_MS: Type.Integer({ minimum: 10, default: 15000, description: 'While a streamed reply waits (in the queue, or on a long prompt), a `: keep-alive` SSE comment goes out this often (ms), so proxies and clients do not time out.' }),
  SHUTDOWN_GRACE_MS: Type.Integer({ minimum: 0, default: 30000, description: 'On SIGTERM or SIGINT, how long in-flight requests and streams may take to finish (ms) before the process exits; streams still running then end with an error event.' }),
  // --- hostile clients (issue 19): receiving requests, connections, refused requests ---
  HEADERS_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 10000, description: 'A request\'s headers must arrive within this (ms) from its first byte (a connection that sends nothing counts too); else 408 `request_timeout` and the connection is closed. At most `REQUEST_TIMEOUT_MS`.' }),
  REQUEST_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 30000, description: 'A whole request, headers and body, must arrive within this (ms) from its first byte; else 408 `request_timeout` and the connection is closed. The response is not limited: a stream may run for minutes.' }),
  KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 72000, description: 'How long an idle keep-alive connection stays open between requests (ms). Keep it above your proxy\'s idle timeout (60 s for nginx and most load balancers), or the proxy may reuse a closing connection.' }),
  MAX_CONNECTIONS: Type.Integer({ minimum: 0, default: 10000, description: 'Open connections per server; one more is answered 503 `server_overloaded` with `Retry-After` and closed, before its request is parsed. 0: no cap.' }),
  MAX_CONNECTIONS_PER_ADDRESS: Type.Integer({ minimum: 0, default: 256, description: 'Open connections per client address (an IPv6 client: its /64); one more is answered 503 `server_overloaded` with `Retry-After` and closed, before its request is parsed. 0: no cap. Not applied when `TRUST_PROXY` is set (every connection then comes from the proxy).' }),
  JSON_MAX_DEPTH: Type.Integer({ minimum: 1, maximum: 10000, default: 64, description: 'Deepest nesting of arrays and objects in a JSON body; deeper is refused with 400 `invalid_json` before it is parsed.' }),
  REFUSED_PER_KEY_PER_MINUTE: Type.Integer({ minimum: 0, default: 30, description: 'Refused API requests (any 4xx but 429: bad JSON, validation, unknown model) per API key per minute; past that, 429 `rate_limit_exceeded` with `Retry-After`, before the body is read. Well-formed requests never count, and refusals never count against the tier. 0: off. Shared through Redis when `REDIS_URL` is set.' }),
  REFUSED_PER_ADDRESS_PER_MINUTE: Type.Integer({ minimum: 0, default: 60, description: 'Refused API requests (any 4xx but 429, failed authentication included) per client address (an IPv6 client: its /64) per minute; past that, 429 `rate_limit_exceeded` with `Retry-After`, before the key is checked. 0: off. Shared through Redis when `REDIS_URL` is set.' }),
  READS_PER_ACCOUNT_PER_MINUTE: Type.Integer({ minimum: 0, default: 600, description: 'Requests that count against no tier limit (`GET /api/v1/usage`, `GET /api/v1/models` and `/models/{id}`, `DELETE /api/v1/responses/{id}`) per account per minute, all its keys together; past that, 429 `rate_limit_exceeded` with `Retry-After`. Bounds how much of the server one account can keep busy with them; generous for polling. 0: off. Shared through Redis when `REDIS_URL` is set.' }),
  // --- storage ---
  DATABASE_URL: Type.String({
    pattern: '^(sqlite://.+|postgres(ql)?://.+)$',
    default: 'sqlite://data/chatd.db',
    description: '`sqlite://<path>` (the path is everything after `sqlite://`, relative to the working directory or absolute), or `postgres://user:password@host:5432/database` to share one database between several replicas (the same migrations run on both; replicas starting together migrate once).',
  }),
  DATABASE_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 10000, description: 'PostgreSQL only: how long connecting, or one query, may take (ms) before the request gets 503 `database_unavailable` (`Retry-After: 1`) instead of waiting on a database that went away.' }),
  USAGE_RECORDS_RETENTION_DAYS: Type.Integer({ minimum: 0, maximum: 36500, default: 0, description: 'Days the record of each API request (time, key prefix, model, tokens, status; the dashboard lists an account\'s latest) is kept; a job on every replica removes older ones hourly, in small batches. The usage report (`GET /api/v1/usage`), the dashboard\'s chart and the monthly allowance read per-day totals, which keep counting removed records. 0 (the default): kept for ever, one row per request.' }),
  // --- stored responses (the Responses API's store: true) ---
  RESPONSES_RETENTION_DAYS: Type.Integer({ minimum: 0, maximum: 36500, default: DEFAULT_STORED_RESPONSE_LIMITS.retentionDays, description: 'Days a stored response (`POST /api/v1/responses` with `store`, the default) is kept; a job on every replica removes older ones hourly, in small batches. A conversation whose first response is removed can no longer be continued (`previous_response_id` gets 404). 0: kept until deleted or evicted.' }),
  RESPONSES_MAX_PER_ACCOUNT: Type.Integer({ minimum: 0, default: DEFAULT_STORED_RESPONSE_LIMITS.maxPerAccount, description: 'Stored responses per account; storing one more evicts that account\'s oldest. 0: nothing is stored (every `previous_response_id` then gets 404).' }),
  RESPONSES_MAX_BYTES: Type.Integer({ minimum: 1024, default: DEFAULT_STORED_RESPONSE_LIMITS.maxBytes, description: 'Largest response, with that turn\'s input, that is stored (bytes of JSON); a larger one is still answered, but not stored (logged as a warning), so it cannot be retrieved or continued.' }),
  RESPONSES_MAX_CONVERSATION_BYTES: Type.Integer({ minimum: 1024, default: DEFAULT_STORED_RESPONSE_LIMITS.maxConversationBytes, description: 'Most stored JSON (bytes) that one conversation read back through `previous_response_id` may hold, its responses and inputs together; a longer one gets 400 `invalid_parameter` naming `previous_response_id` (send the conversation as `input` instead). At most 1,000 earlier responses are followed either way.' }),
  // --- accounts, tiers, limits and the dashboard (issue 4) ---
  CHATD_ADMIN_EMAIL: Type.String({ minLength: 3, default: 'admin@localhost', description: 'The admin account that the first start on an empty database creates, printing its API key once.' }),
  CHATD_ADMIN_KEY: Type.Optional(Type.String({
    pattern: '^sk-chatd-[A-Za-z0-9]{32}$',
    description: 'Use this key for that admin account instead of a random one (for automation): `sk-chatd-` followed by 32 letters or digits.',
    examples: ['sk-chatd-0123456789abcdefghijABCDEFGHIJ01'],
  })),
  REGISTRATION: Type.Enum(['open', 'closed'], { default: 'open', description: '`open`: anyone may register at `/api/register`; `closed`: only the CLI creates accounts.' }),
  TIERS_FILE: Type.Optional(Type.String({ minLength: 1, description: 'Tiers and their limits (requests and tokens per minute, calls per month, max tokens per request, models); new accounts get the file\'s default tier. Unset: `tiers.json` in chatd\'s own directory; a relative path set here is taken from the working directory.', examples: ['tiers.json'] })),
  LOGIN_ATTEMPTS_PER_MINUTE: Type.Integer({ minimum: 1, default: 10, description: 'Log-in, registration and password-change attempts allowed per client address per minute (then 429).' }),
  KEYS_PER_ACCOUNT: Type.Integer({ minimum: 1, maximum: 100000, default: DEFAULT_KEY_ALLOWANCE.active, description: 'Active API keys an account may hold, created at `/api`; one more is refused (409) until one is revoked. Bounds what one account keeps in the database and shows on its page. `chatd keys create` (the operator) is not bounded.' }),
  KEYS_PER_ACCOUNT_PER_DAY: Type.Integer({ minimum: 1, maximum: 100000, default: DEFAULT_KEY_ALLOWANCE.perDay, description: 'API keys an account may create at `/api` in 24 hours, revoked ones included (then 429 until the oldest of them is a day old): revoking and creating again cannot grow the keys table without bound. `chatd keys create` is not counted.' }),
  COOKIE_SECURE: Type.Enum(['auto', 'true', 'false'], { default: 'auto', description: 'Secure flag of the dashboard\'s cookies: `auto` (set when the request came over HTTPS, directly or via `X-Forwarded-Proto` with `TRUST_PROXY`; plain-HTTP localhost still works), `true` (always: behind TLS in production; browsers then drop the cookies on plain HTTP), or `false`.' }),
  SESSION_SECRET: Type.Optional(Type.String({ minLength: 32, description: 'Signs the dashboard\'s CSRF cookie (32 characters or more). Unset: a random secret is created once and kept in the database, so every replica on the same database shares it.' })),
  // --- several replicas ---
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://.+', description: 'Keep rate limits, allowances and log-in throttling in Redis (`redis://` or `rediss://`) instead of in-process, so several replicas behind a load balancer enforce one account\'s limits once in total. Unset: in-process.', examples: ['redis://127.0.0.1:6379'] })),
  REDIS_PREFIX: Type.String({ default: 'chatd:', description: 'Prefix of every Redis key chatd writes.' }),
  // --- models ---
  MODELS_FILE: Type.Optional(Type.String({ minLength: 1, description: 'Which models to serve. Unset: `models/models.json` in chatd\'s own directory; a relative path set here is taken from the working directory. Relative model paths inside it resolve against `MODELS_DIR`, else the directory holding the file.', examples: ['models/models.json'] })),
  ONNX_DEVICE: Type.Enum(['auto', 'cpu', 'cuda', 'webgpu'], { default: 'auto', description: 'Execution provider for local ONNX models: `auto` (CUDA when its provider loads, then a real GPU through WebGPU, never a software renderer, else the CPU), `cpu`, `cuda`, or `webgpu` (onnxruntime\'s WebGPU provider over Vulkan: NVIDIA, AMD and Intel GPUs; see docs/deployment.md). A device asked for by name that cannot be used is an error. A models.json entry\'s `device` overrides it.' }),
  ONNX_WEBGPU_CAPTURE: Type.Integer({ minimum: 0, maximum: 1048576, default: 0, description: 'On the WebGPU device, requests decoding take their steps on the model\'s capture step (`onnx/model_step.onnx`, which `chatd convert --for gpu --capture-step` writes): onnxruntime records the step once and replays it, without the host\'s dispatch of every kernel. The value is the positions a request\'s cache may hold there (its prompt and output; longer ones take the usual steps), at most what one request may hold (the context length, within `KV_CACHE_MB`); its buffers take that many positions of KV cache a row (`ONNX_WEBGPU_CAPTURE_ROWS`) in GPU memory beside the budget (`KV_CACHE_MB`); a step\'s attention reads only each request\'s own positions. `0` (the default): off. Measured exact on a software renderer; not yet measured on a GPU (docs/performance.md).' }),
  ONNX_WEBGPU_CAPTURE_ROWS: Type.Integer({ minimum: 1, maximum: 256, default: 1, description: 'With `ONNX_WEBGPU_CAPTURE`, how many requests decoding together the capture step takes (its rows; at most `MAX_BATCH`): more decoding together take the usual steps. Each replay computes every row, taken or not (on a GPU a step of 8 rows reads the weights once, as a step of 1 does); each row holds `ONNX_WEBGPU_CAPTURE` positions of KV cache in GPU memory (and the host stages the rows it loads in memory that grows to what loads have needed, at most that size). A request joining the rows reloads the others\' caches from the host\'s copies once. `1` (the default): a request decoding alone.' }),
  ONNX_THREADS: Type.Integer({ minimum: 0, maximum: 1024, default: 0, description: 'Intra-op threads for local ONNX models; 0: one per CPU this process may use (`os.availableParallelism()`). A models.json entry\'s `threads` overrides it.' }),
  MAX_BATCH: Type.Integer({ minimum: 1, maximum: 256, default: DEFAULT_SCHEDULER.maxBatch, description: 'Continuous batching: sequences per local model that decode together in one batched step.' }),
  GRAMMAR_COMPILE_TIMEOUT_MS: Type.Integer({ minimum: 100, maximum: 600000, default: 5000, description: 'How long a request\'s new JSON schemas may take to compile (ms), together: a `response_format`\'s, or every tool\'s of a forced tool call (`tool_choice` `required` or a named tool), in one worker of its own that is terminated at the limit; past it the request gets 400 `invalid_parameter` naming the field of the schema it was on and the limit, and its prompt\'s estimate stays counted against the minute\'s tokens. Only schemas that compiled within it are compiled again where they serve (in the account\'s own grammar worker), so this also bounds how long one new schema can delay that account\'s own structured-output requests (they wait for it before they start; other accounts\' are not delayed).' }),
  GRAMMAR_COMPILES_MAX: Type.Integer({ minimum: 1, maximum: 64, default: 4, description: 'New `response_format` schemas compiling at once per local model (each in a worker thread of its own); one more gets 503 `server_overloaded` with `Retry-After`. Schemas an account already used are cached and do not count.' }),
  GRAMMAR_COMPILES_PER_ACCOUNT: Type.Integer({ minimum: 1, maximum: 64, default: 2, description: 'New `response_format` schemas one account may have compiling at once per local model; one more gets 429 `rate_limit_exceeded` with `Retry-After`.' }),
  GRAMMAR_WORKERS_MAX: Type.Integer({ minimum: 1, maximum: 64, default: 4, description: 'Serving grammar workers per local model: each account using `response_format` gets a worker thread of its own that holds its compiled schemas and its running requests\' grammar state, so one account\'s compile holds up only that account\'s structured output. Each loads the model\'s vocabulary (about 30 MiB resident for a 512-token vocabulary; expected in the low hundreds of MiB for a 150k-token one, see docs/security.md). A new account past the bound takes over the least recently used worker that no running request uses (the thread is kept, every grammar and grammar state of the account it served is dropped); when none is free, its request gets 503 `server_overloaded` with `Retry-After`.' }),
  GRAMMAR_WORKER_MEMORY_MB: Type.Integer({ minimum: 16, maximum: 65536, default: 512, description: 'Memory (MiB, mostly WebAssembly, which never shrinks) a `response_format` schema\'s compile may take: a compile past it is stopped and the request gets 400 `invalid_parameter` naming `response_format` and the bound. Each serving grammar worker (one per account, see `GRAMMAR_WORKERS_MAX`), which holds that account\'s compiled schemas and its running requests\' grammar state, is replaced by a fresh one once past it and no running request uses it.' }),
  KV_CACHE_MB: Type.Integer({ minimum: 0, maximum: 16777216, default: 0, description: 'Memory for each local model\'s KV cache, in MiB. A request starts only while the caches it and the running requests may fill (prompt + `max_tokens` each) fit; the others wait in the queue. 0: a quarter of the memory this process may use (the machine\'s, or the container\'s limit).' }),
  MIXED_BATCHES: Type.Enum(['0', '1', 'true', 'false'], { default: '1', description: 'Continuous batching: a request that arrives while others decode has its prompt fed inside their decode steps (one pass over the weights for both) instead of in runs of its own between them; graphs `chatd convert` writes with the append cache only, and only while no prompt graph is loaded (see `PROMPT_GRAPH`; others always take separate runs). `1` (or `true`) or `0` (or `false`).' }),
  PROMPT_GRAPH: Type.Enum(['0', '1', 'true', 'false'], { default: '1', description: 'Where a local model\'s directory has `onnx/model_prompt.onnx` (the int8 copy `chatd pull` writes for the default model, or `chatd convert --prompt-graph`), run prompt tokens on it, on the CPU: several times faster prompts than the int4 graph, which generated tokens still run on. It holds its own weights in memory (about 2 GB for the 1.5B model); `0` does not load it. While it is loaded, prompts and decode steps take separate runs (no mixed batches). `1` (or `true`) or `0` (or `false`).' }),
  PREFIX_CACHE: Type.Enum(['0', '1', 'true', 'false'], { default: '1', description: 'Keep requests\' KV caches (within `KV_CACHE_MB`) so a request that starts the same way, such as the next turn of a chat or one with the same system prompt, computes only what is new; while idle, the engine also computes each reply\'s conversation as the next turn will send it, so that turn computes only its new message: `1` (or `true`) or `0` (or `false`).' }),
  PREFIX_CACHE_MB: Type.Integer({ minimum: 0, maximum: 16777216, default: 0, description: 'Memory (MiB) the prefix cache may keep per local model, in all, once requests have finished (their caches and the next turns computed ahead), within `KV_CACHE_MB`. Prompts that never repeat (every agent request carries its own tools) fill it and then replace its oldest entries, the account keeping the most losing its own first, so the process\'s memory levels off here instead of climbing to the whole KV budget. 0: two full context windows of the model, at least 384 MiB (deepseek-r1-distill-qwen-1.5b: 2 x 16384 positions x 56 KiB = 1.75 GiB, two or three agent conversations; stories260k: 384 MiB). `PREFIX_CACHE=0` keeps nothing.' }),
  PREFIX_CACHE_SHARED_PREFIX: Type.String({ maxLength: 100000, default: '', description: 'A system prompt that every account sends (exactly this text as the model sees it, with the default controls) whose prefix cache every account may reuse: a request whose prompt starts with exactly its tokens reuses them up to their end, whoever computed them, and nothing beyond. Every other cached prompt is reused only by the account (and `cache_salt`) that computed it. The risk: any account can tell, from `cached_tokens` or the time to its first token, whether this prompt was computed recently, so put nothing secret in it. Empty: no shared prefix.' }),
  PREFILL_CHUNK: Type.Integer({ minimum: 0, maximum: 4096, default: DEFAULT_SCHEDULER.prefillChunk, description: 'Prompt tokens fed per step while other sequences decode (a long prompt never freezes them); smaller: steadier streams, a later first token for newcomers. 0: sized from measured timings so one chunk costs about 1.75 decode steps (about 6 tokens on a 2-core CPU, up to 512 on a GPU). With nothing else decoding, prompts go in chunks of 512 either way.' }),
  QUEUE_SIZE: Type.Integer({ minimum: 1, maximum: 100000, default: 64, description: 'Chat completions per model that may be in progress at once (generating or waiting for the engine); one more gets 503 `server_overloaded` with `Retry-After` at once instead of queueing.' }),
  // --- upstream models (issue 8) ---
  UPSTREAM_CONNECT_TIMEOUT_MS: Type.Integer({ minimum: 1, default: 10000, description: 'Connecting to an upstream model server (TCP and TLS), per attempt (ms).' }),
  UPSTREAM_FIRST_BYTE_TIMEOUT_MS: Type.Integer({ minimum: 1, default: 60000, description: 'From sending a request upstream to its response headers, per attempt (ms).' }),
  UPSTREAM_IDLE_TIMEOUT_MS: Type.Integer({ minimum: 1, default: 60000, description: 'The longest silence inside an upstream\'s reply (ms); a reply that stalls gets 504 `upstream_timeout`.' }),
  UPSTREAM_RETRIES: Type.Integer({ minimum: 0, maximum: 10, default: 2, description: 'Extra attempts when an upstream fails before sending anything (refused or reset connection, connect or first-byte timeout, HTTP 408, 429 or 5xx). Once it has sent part of a reply, nothing is retried.' }),
  // --- web search (issue 8) ---
  SEARCH_PROVIDER: Type.Enum(['', 'searxng', 'google', 'brave'], { default: '', description: 'Web search for `googleSearchStatus`: `searxng`, `google` or `brave`; empty: none, and such requests get 400 `search_unavailable`. A setting the chosen provider needs that is missing stops the server at start-up.' }),
  SEARXNG_URL: Type.Optional(Type.String({ pattern: '^https?://.+', description: 'searxng: base URL of your instance. chatd calls `GET <url>/search?q=…&format=json`, so its `settings.yml` must list `json` under `search.formats`.', examples: ['http://127.0.0.1:8888'] })),
  GOOGLE_CSE_KEY: Type.Optional(Type.String({ minLength: 1, description: 'google: Programmable Search (Custom Search JSON API) key.' })),
  GOOGLE_CSE_ID: Type.Optional(Type.String({ minLength: 1, description: 'google: the search engine id (`cx`).' })),
  BRAVE_API_KEY: Type.Optional(Type.String({ minLength: 1, description: 'brave: Brave Search API subscription token (sent as `X-Subscription-Token`).' })),
  SEARCH_RESULTS: Type.Integer({ minimum: 1, maximum: 10, default: 5, description: 'Results put in the prompt as numbered sources (1-10).' }),
  SEARCH_TIMEOUT_MS: Type.Integer({ minimum: 1, default: 8000, description: 'Time limit for the whole search (ms); a slower or failing provider gives 502 `search_failed`.' }),
  SEARCH_CACHE_TTL_MS: Type.Integer({ minimum: 0, default: 300000, description: 'How long a query\'s results are reused (ms; per account and query in any letter case, up to 256 in all: one account\'s cached search is never another\'s, so how fast a search answers tells nobody what others searched for); 0 turns the cache off.' }),
  GOOGLE_CSE_URL: Type.Optional(Type.String({ pattern: '^https?://.+', description: 'google: Custom Search JSON API endpoint; set only for a proxy in front of the provider or a test double.', examples: ['https://www.googleapis.com/customsearch/v1'] })),
  BRAVE_SEARCH_URL: Type.Optional(Type.String({ pattern: '^https?://.+', description: 'brave: web search endpoint; set only for a proxy in front of the provider or a test double.', examples: ['https://api.search.brave.com/res/v1/web/search'] })),
  // --- operations (issue 40): metrics and traces ---
  METRICS_FAMILY_PREFIX: Type.Enum([...FAMILY_PREFIXES], { default: 'vllm:', description: 'Prefix of the serving families `/metrics` exposes under vLLM\'s names (`num_requests_running`, `time_to_first_token_seconds`, ...): `vllm:` makes the Grafana dashboards and alerts written for vLLM read chatd unchanged; `chatd:` keeps them apart from a vLLM that the same Prometheus scrapes (queries then need `vllm:` replaced by `chatd:`; the shipped dashboard has a variable for it). See docs/operations.md.' }),
  METRICS_ACCOUNTS_TOP: Type.Integer({ minimum: 0, maximum: ACCOUNTS_TOP_MAX, default: 0, description: `Per-account figures in \`/metrics\` (tokens, requests, refusals, prefix cache hits, labelled with the account's id, never a key or an email): at most this many accounts get series of their own (the first to use the server, then every 10 minutes those that used it most), the rest are summed under \`account="other"\`. 0: no per-account series. At most ${ACCOUNTS_TOP_MAX}.` }),
  METRICS_TOKEN: Type.Optional(Type.String({ minLength: 16, maxLength: 1024, pattern: '^[\\x21-\\x7e]+$', description: 'Require `Authorization: Bearer <this token>` on `GET /metrics` (Prometheus: `authorization: { credentials: ... }` in the scrape config); without it, 401. At least 16 printable characters (e.g. `openssl rand -hex 24`); never logged. Unset: `/metrics` is open to whoever reaches it.', examples: ['0123456789abcdef0123456789abcdef'] })),
  METRICS_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: 'Serve `GET /metrics` on a listener of its own, at `METRICS_HOST`:`METRICS_PORT`, instead of on `PORT` (which then answers it 404): the API port can face the internet while metrics stay on a private interface. 0: any free port. Unset: on `PORT`.', examples: [9464] })),
  METRICS_HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'The interface the `METRICS_PORT` listener binds (`0.0.0.0` in a container whose Prometheus is elsewhere).' }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://.+', description: 'Turns tracing on: spans are exported over OTLP/HTTP (protobuf) to `<this URL>/v1/traces` (an OpenTelemetry Collector, Jaeger, Tempo...), one trace per API request. Unset (and no `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): no tracing, at no cost.', examples: ['http://127.0.0.1:4318'] })),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://.+', description: 'The whole OTLP/HTTP traces URL, used as it is; wins over `OTEL_EXPORTER_OTLP_ENDPOINT`.', examples: ['http://127.0.0.1:4318/v1/traces'] })),
  OTEL_EXPORTER_OTLP_PROTOCOL: Type.Enum(['http/protobuf'], { default: 'http/protobuf', description: 'The OTLP transport: `http/protobuf` only (a collector\'s port 4318; gRPC on 4317 is not spoken).' }),
  OTEL_EXPORTER_OTLP_HEADERS: Type.Optional(Type.String({ minLength: 1, maxLength: 8192, description: 'Headers sent with every export, as `name=value` pairs separated by commas (values URL-encoded), e.g. a hosted collector\'s key; never logged.', examples: ['authorization=Bearer%20...'] })),
  OTEL_SERVICE_NAME: Type.String({ minLength: 1, maxLength: 256, default: 'chatd', description: 'The traces\' `service.name`.' }),
  OTEL_TRACES_SAMPLER_ARG: Type.Number({ minimum: 0, maximum: 1, default: 1, description: 'Share of requests traced, 0 to 1, for requests without a `traceparent`; one with a `traceparent` is traced as its caller decided (parent-based sampling).' }),
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: Type.Enum(['0', '1', 'true', 'false'], { default: 'false', description: 'Put prompts and outputs into the model spans (`gen_ai.input.messages`, `gen_ai.output.messages`, cut at about 64 KiB each): everything the accounts send then reaches your trace store. `false` (the default) keeps every prompt and output out of spans.' }),
  // --- deployment (issue 7): model download and reverse proxy ---
  MODELS_DIR: Type.Optional(Type.String({ minLength: 1, description: 'Directory that relative model paths in models.json resolve against, and that `chatd pull` writes into. Unset: the directory holding `MODELS_FILE`. The Docker image sets `/models`.', examples: ['/models'] })),
  CHATD_AUTO_PULL: Type.Enum(['0', '1', 'true', 'false'], { default: '1', description: '`chatd serve` downloads the missing files of local models in the background at start (`1` or `true`), or only reports them (`0` or `false`).' }),
  HF_ENDPOINT: Type.String({ pattern: '^https?://.+', default: 'https://huggingface.co', description: 'The Hugging Face Hub that `chatd pull` downloads from, or a mirror that speaks its API.' }),
  HF_TOKEN: Type.Optional(Type.String({ minLength: 1, description: 'Hugging Face access token for gated or private repositories; never logged.', examples: ['hf_...'] })),
  TRUST_PROXY: Type.String({
    pattern: '^(true|false|[0-9]+|[0-9A-Fa-f.:/]+(,[ ]*[0-9A-Fa-f.:/]+)*)$',
    default: 'false',
    description: 'Which `X-Forwarded-For` / `X-Forwarded-Proto` headers to believe for the client address in logs and rate limits: `false` (direct clients), `true` (any proxy: only when chatd is reachable solely through the proxy), a hop count (`1` = one proxy in front), or the proxies\' addresses/CIDRs, comma-separated (e.g. `172.16.0.0/12,127.0.0.1`).',
  }),
})

type RawConfig = Static<typeof ConfigSchema>

export interface Config {
  port: number
  host: string
  /** Parsed DATABASE_URL. */
  database: { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string }
  /** DATABASE_TIMEOUT_MS: bounds connecting to PostgreSQL and each query. */
  databaseTimeoutMs: number
  modelsFile: string
  logLevel: RawConfig['LOG_LEVEL']
  adminKey?: string
  adminEmail: string
  onnxDevice: RawConfig['ONNX_DEVICE']
  onnxThreads: number
  maxBatch: number
  prefillChunk: number
  /** KV_CACHE_MB in bytes; 0: derived from the machine's memory (engine/onnx/cache/kv-budget.ts). */
  kvCacheBytes: number
  /** PREFIX_CACHE: reuse earlier requests' caches for prompts that start the same way. */
  prefixCache: boolean
  /** PREFIX_CACHE_MB in bytes: what finished requests' caches may keep in all; 0: two context windows of the model (at least 384 MiB). */
  prefixCacheBytes: number
  /** PREFIX_CACHE_SHARED_PREFIX: a system prompt whose cache every account may reuse; '' for none. */
  prefixCacheSharedPrefix: string
  /** MIXED_BATCHES: decoding rows ride in prompt chunks' runs (graphs that pack rows). */
  mixedBatches: boolean
  /** PROMPT_GRAPH: prompts run on the model's int8 prompt graph where it has one (CPU). */
  promptGraph: boolean
  /** ONNX_WEBGPU_CAPTURE: positions a request may hold on the WebGPU device's capture step (each of its rows); 0: off. */
  webgpuCapture: number
  /** ONNX_WEBGPU_CAPTURE_ROWS: requests decoding together that the capture step takes. */
  webgpuCaptureRows: number
  /** GRAMMAR_COMPILE_TIMEOUT_MS, GRAMMAR_COMPILES_PER_ACCOUNT, GRAMMAR_COMPILES_MAX, GRAMMAR_WORKER_MEMORY_MB (bytes), GRAMMAR_WORKERS_MAX. */
  grammar: { compileTimeoutMs: number; perScope: number; total: number; memoryBytes: number; workers: number }
  queueSize: number
  bodyLimit: number
  /** MAX_MESSAGES, MAX_MESSAGE_CHARS, MAX_CONTENT_PARTS: the conversation's size limits. */
  inputLimits: InputLimits
  sseKeepAliveMs: number
  shutdownGraceMs: number
  /** HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS. */
  connections: ConnectionLimits
  /** JSON_MAX_DEPTH. */
  jsonMaxDepth: number
  /** REFUSED_PER_KEY_PER_MINUTE, REFUSED_PER_ADDRESS_PER_MINUTE; 0: that meter is off. */
  refusedPerMinute: { key: number; address: number }
  /** READS_PER_ACCOUNT_PER_MINUTE; 0: not metered. */
  readsPerAccountPerMinute: number
  /** Base for relative model paths; undefined: the directory holding modelsFile. */
  modelsDir?: string
  autoPull: boolean
  hfEndpoint: string
  hfToken?: string
  /** Fastify's trustProxy: which X-Forwarded-* headers to believe. */
  trustProxy: boolean | number | string[]
  /** Timeouts and retries for backend "openai" models. */
  upstream: UpstreamSettings
  /** The web search provider; undefined when SEARCH_PROVIDER is empty. */
  search?: SearchSettings
  /** METRICS_*: the serving families' prefix, per-account series, and who may read /metrics where. */
  metrics: MetricsSettings
  /** OTEL_*: where traces go; undefined when tracing is off. */
  tracing?: TracingSettings
  tiersFile: string
  registration: 'open' | 'closed'
  /** Set: limits live in Redis (several replicas); unset: in-process. */
  redisUrl?: string
  redisPrefix: string
  sessionSecret?: string
  /** 'auto': Secure when the request came over HTTPS (directly, or per X-Forwarded-Proto with TRUST_PROXY). */
  cookieSecure: 'auto' | boolean
  loginAttemptsPerMinute: number
  /** KEYS_PER_ACCOUNT, KEYS_PER_ACCOUNT_PER_DAY: what an account may create at /api. */
  keyAllowance: KeyAllowance
  /** RESPONSES_RETENTION_DAYS, RESPONSES_MAX_PER_ACCOUNT, RESPONSES_MAX_BYTES, RESPONSES_MAX_CONVERSATION_BYTES. */
  storedResponses: StoredResponseLimits
  /** USAGE_RECORDS_RETENTION_DAYS: days a request's usage record is kept; 0: for ever. */
  usageRetentionDays: number
  /**
   * What `${VAR}` in models.json reads: the environment over the .env file
   * (real variables win), so a variable set only in .env reaches models.json too.
   * Holds secrets: never log it.
   */
  env: Record<string, string | undefined>
}

export interface MetricsSettings {
  familyPrefix: FamilyPrefix
  /** 0: no per-account series. */
  accountsTop: number
  /** Bearer token GET /metrics requires; undefined: open. */
  token?: string
  /** Set: /metrics is served on a listener of its own (METRICS_HOST:METRICS_PORT), not on PORT. */
  listen?: { host: string; port: number }
}

export interface ConnectionLimits {
  headersTimeoutMs: number
  requestTimeoutMs: number
  keepAliveTimeoutMs: number
  /** 0: no cap. */
  maxConnections: number
  /** 0: no cap. */
  maxConnectionsPerAddress: number
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 72_000,
  maxConnections: 10_000,
  maxConnectionsPerAddress: 256,
}

export class ConfigError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

interface AjvError { instancePath: string; message?: string; params: Record<string, unknown> }

/** What a setting's pattern asks for, in words: a raw regular expression helps no one. */
const PATTERN_WORDS: Record<string, string> = {
  DATABASE_URL: 'must be sqlite://<path> or postgres://user:password@host:5432/database',
  CHATD_ADMIN_KEY: 'must be sk-chatd- followed by 32 letters or digits (npx chatd keys create makes one)',
  REDIS_URL: 'must be a redis:// or rediss:// URL',
  METRICS_TOKEN: 'must be printable ASCII characters without spaces',
  TRUST_PROXY: 'must be true, false, a number of proxies, or addresses and CIDR ranges separated by commas',
}

/** One failed check of one setting, in words. */
function describeIssue (name: string, e: AjvError): string {
  const { params } = e
  if (Array.isArray(params.allowedValues)) {
    const values = params.allowedValues.map(v => v === '' ? 'empty (none)' : String(v))
    return `must be one of ${values.join(', ')}`
  }
  if (typeof params.pattern === 'string') {
    return PATTERN_WORDS[name] ?? (params.pattern.startsWith('^https?://') ? 'must be an http:// or https:// URL' : 'is not in the form docs/configuration.md gives')
  }
  if (params.type === 'integer') return 'must be a whole number'
  if (typeof params.limit === 'number' && /fewer than/.test(e.message ?? '')) return params.limit === 1 ? 'must not be empty' : `must be at least ${params.limit} characters`
  return e.message ?? 'is invalid'
}

/** Values never echoed back in an error message. */
const SECRET_VARIABLES = new Set(['CHATD_ADMIN_KEY', 'DATABASE_URL', 'HF_TOKEN', 'GOOGLE_CSE_KEY', 'BRAVE_API_KEY', 'REDIS_URL', 'SESSION_SECRET', 'METRICS_TOKEN', 'OTEL_EXPORTER_OTLP_HEADERS'])

/** The variables of the .env file in the working directory; none when there is no such file. */
export function readDotenv (path = '.env'): Record<string, string> {
  let text: string
  try {
    text = readFileSync(resolve(path), 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {}
    throw new ConfigError(`Invalid configuration:\n  .env: cannot be read: ${(err as Error).message}`)
  }
  return parseEnv(text) as Record<string, string>
}

/**
 * Reads the settings from `source` (process.env by default) and, when `dotenv`
 * is set, from a .env file underneath it (real environment variables win).
 */
export function loadConfig (source: Record<string, string | undefined> = process.env, opts: { dotenv?: boolean } = {}): Config {
  const env = { ...(opts.dotenv ? readDotenv() : {}), ...source }
  let raw: RawConfig
  try {
    raw = envSchema<RawConfig>({
      // env-schema mutates the schema (additionalProperties); give it a copy.
      schema: structuredClone(ConfigSchema),
      data: { ...env },
      env: false,
      dotenv: false,
    })
  } catch (err) {
    const errors = (err as { errors?: AjvError[] }).errors
    if (!errors) throw err
    const lines = errors.map(e => {
      const name = e.instancePath.replace(/^\//, '') || String(e.params.missingProperty ?? '')
      const got = env[name]
      const shown = got === undefined || SECRET_VARIABLES.has(name) ? '' : ` (got ${JSON.stringify(got)})`
      return `  ${name}: ${describeIssue(name, e)}${shown}`
    })
    throw new ConfigError(`Invalid configuration:\n${[...new Set(lines)].join('\n')}`)
  }
  // Node refuses a headers timeout longer than the request's; say so by name.
  if (raw.HEADERS_TIMEOUT_MS > raw.REQUEST_TIMEOUT_MS) {
    throw new ConfigError(`Invalid configuration:\n  HEADERS_TIMEOUT_MS: must be at most REQUEST_TIMEOUT_MS (${raw.REQUEST_TIMEOUT_MS}) (got ${raw.HEADERS_TIMEOUT_MS})`)
  }
  return {
    port: raw.PORT,
    host: raw.HOST,
    database: parseDatabaseUrl(raw.DATABASE_URL),
    databaseTimeoutMs: raw.DATABASE_TIMEOUT_MS,
    modelsFile: raw.MODELS_FILE ?? DEFAULT_MODELS_FILE,
    logLevel: raw.LOG_LEVEL,
    adminKey: raw.CHATD_ADMIN_KEY,
    adminEmail: raw.CHATD_ADMIN_EMAIL,
    onnxDevice: raw.ONNX_DEVICE,
    onnxThreads: raw.ONNX_THREADS,
    maxBatch: raw.MAX_BATCH,
    prefillChunk: raw.PREFILL_CHUNK,
    kvCacheBytes: raw.KV_CACHE_MB * 2 ** 20,
    prefixCache: raw.PREFIX_CACHE === '1' || raw.PREFIX_CACHE === 'true',
    prefixCacheBytes: raw.PREFIX_CACHE_MB * 2 ** 20,
    prefixCacheSharedPrefix: raw.PREFIX_CACHE_SHARED_PREFIX,
    mixedBatches: raw.MIXED_BATCHES === '1' || raw.MIXED_BATCHES === 'true',
    promptGraph: raw.PROMPT_GRAPH === '1' || raw.PROMPT_GRAPH === 'true',
    webgpuCapture: raw.ONNX_WEBGPU_CAPTURE,
    webgpuCaptureRows: raw.ONNX_WEBGPU_CAPTURE_ROWS,
    grammar: {
      compileTimeoutMs: raw.GRAMMAR_COMPILE_TIMEOUT_MS,
      perScope: raw.GRAMMAR_COMPILES_PER_ACCOUNT,
      total: raw.GRAMMAR_COMPILES_MAX,
      memoryBytes: raw.GRAMMAR_WORKER_MEMORY_MB * 2 ** 20,
      workers: raw.GRAMMAR_WORKERS_MAX,
    },
    queueSize: raw.QUEUE_SIZE,
    bodyLimit: raw.BODY_LIMIT,
    inputLimits: { maxMessages: raw.MAX_MESSAGES, maxMessageChars: raw.MAX_MESSAGE_CHARS, maxContentParts: raw.MAX_CONTENT_PARTS },
    sseKeepAliveMs: raw.SSE_KEEPALIVE_MS,
    shutdownGraceMs: raw.SHUTDOWN_GRACE_MS,
    connections: {
      headersTimeoutMs: raw.HEADERS_TIMEOUT_MS,
      requestTimeoutMs: raw.REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: raw.KEEP_ALIVE_TIMEOUT_MS,
      maxConnections: raw.MAX_CONNECTIONS,
      maxConnectionsPerAddress: raw.MAX_CONNECTIONS_PER_ADDRESS,
    },
    jsonMaxDepth: raw.JSON_MAX_DEPTH,
    refusedPerMinute: { key: raw.REFUSED_PER_KEY_PER_MINUTE, address: raw.REFUSED_PER_ADDRESS_PER_MINUTE },
    readsPerAccountPerMinute: raw.READS_PER_ACCOUNT_PER_MINUTE,
    modelsDir: raw.MODELS_DIR,
    autoPull: raw.CHATD_AUTO_PULL === '1' || raw.CHATD_AUTO_PULL === 'true',
    hfEndpoint: raw.HF_ENDPOINT.replace(/\/+$/, ''),
    hfToken: raw.HF_TOKEN,
    trustProxy: parseTrustProxy(raw.TRUST_PROXY),
    upstream: {
      connectTimeoutMs: raw.UPSTREAM_CONNECT_TIMEOUT_MS,
      firstByteTimeoutMs: raw.UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
      idleTimeoutMs: raw.UPSTREAM_IDLE_TIMEOUT_MS,
      retries: raw.UPSTREAM_RETRIES,
    },
    search: parseSearch(raw),
    metrics: {
      familyPrefix: raw.METRICS_FAMILY_PREFIX,
      accountsTop: raw.METRICS_ACCOUNTS_TOP,
      token: raw.METRICS_TOKEN,
      ...(raw.METRICS_PORT !== undefined ? { listen: { host: raw.METRICS_HOST, port: raw.METRICS_PORT } } : {}),
    },
    tracing: parseTracing(raw),
    tiersFile: raw.TIERS_FILE ?? DEFAULT_TIERS_FILE,
    registration: raw.REGISTRATION,
    redisUrl: raw.REDIS_URL,
    redisPrefix: raw.REDIS_PREFIX,
    sessionSecret: raw.SESSION_SECRET,
    cookieSecure: raw.COOKIE_SECURE === 'auto' ? 'auto' : raw.COOKIE_SECURE === 'true',
    loginAttemptsPerMinute: raw.LOGIN_ATTEMPTS_PER_MINUTE,
    keyAllowance: { active: raw.KEYS_PER_ACCOUNT, perDay: raw.KEYS_PER_ACCOUNT_PER_DAY },
    usageRetentionDays: raw.USAGE_RECORDS_RETENTION_DAYS,
    storedResponses: {
      retentionDays: raw.RESPONSES_RETENTION_DAYS,
      maxPerAccount: raw.RESPONSES_MAX_PER_ACCOUNT,
      maxBytes: raw.RESPONSES_MAX_BYTES,
      maxConversationBytes: raw.RESPONSES_MAX_CONVERSATION_BYTES,
    },
    env,
  }
}

/** SEARCH_PROVIDER and the settings the chosen provider needs; a missing one is named. */
function parseSearch (raw: RawConfig): SearchSettings | undefined {
  const common = { results: raw.SEARCH_RESULTS, timeoutMs: raw.SEARCH_TIMEOUT_MS, cacheTtlMs: raw.SEARCH_CACHE_TTL_MS }
  const require = (names: Array<keyof RawConfig>): void => {
    const missing = names.filter(n => raw[n] === undefined || raw[n] === '')
    if (missing.length > 0) {
      throw new ConfigError(`Invalid configuration:\n${missing.map(n => `  ${n}: required when SEARCH_PROVIDER=${raw.SEARCH_PROVIDER}`).join('\n')}`)
    }
  }
  switch (raw.SEARCH_PROVIDER) {
    case '': return undefined
    case 'searxng':
      require(['SEARXNG_URL'])
      return { provider: 'searxng', url: raw.SEARXNG_URL!, ...common }
    case 'google':
      require(['GOOGLE_CSE_KEY', 'GOOGLE_CSE_ID'])
      return { provider: 'google', key: raw.GOOGLE_CSE_KEY!, engineId: raw.GOOGLE_CSE_ID!, endpoint: raw.GOOGLE_CSE_URL, ...common }
    case 'brave':
      require(['BRAVE_API_KEY'])
      return { provider: 'brave', key: raw.BRAVE_API_KEY!, endpoint: raw.BRAVE_SEARCH_URL, ...common }
  }
}

/** OTEL_*: tracing's settings, or undefined when no endpoint is set (tracing off). */
function parseTracing (raw: RawConfig): TracingSettings | undefined {
  const base = raw.OTEL_EXPORTER_OTLP_ENDPOINT
  const url = raw.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (base === undefined ? undefined : `${base.replace(/\/+$/, '')}/v1/traces`)
  if (url === undefined) return undefined
  return {
    url,
    headers: parseOtlpHeaders(raw.OTEL_EXPORTER_OTLP_HEADERS),
    serviceName: raw.OTEL_SERVICE_NAME,
    sampleRatio: raw.OTEL_TRACES_SAMPLER_ARG,
    captureContent: raw.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT === '1' || raw.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT === 'true',
  }
}

/** `name=value,name2=value2` (values URL-encoded), as OpenTelemetry writes OTEL_EXPORTER_OTLP_HEADERS; the value is never echoed. */
export function parseOtlpHeaders (value: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {}
  if (value === undefined) return headers
  for (const pair of value.split(',')) {
    if (pair.trim() === '') continue
    const at = pair.indexOf('=')
    const name = pair.slice(0, at).trim().toLowerCase()
    let decoded: string | undefined
    try {
      decoded = at > 0 ? decodeURIComponent(pair.slice(at + 1).trim()) : undefined
    } catch {}
    // A header name is a token; a value has no line breaks.
    if (decoded === undefined || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name) || /[\r\n\0]/.test(decoded)) {
      throw new ConfigError('Invalid configuration:\n  OTEL_EXPORTER_OTLP_HEADERS: must be name=value pairs separated by commas, values URL-encoded')
    }
    headers[name] = decoded
  }
  return headers
}

/** TRUST_PROXY as Fastify's trustProxy: a boolean, a hop count, or the proxies' addresses. */
export function parseTrustProxy (value: string): boolean | number | string[] {
  if (value === 'true') return true
  if (value === 'false') return false
  if (/^[0-9]+$/.test(value)) return Number(value)
  return value.split(',').map(v => v.trim())
}

/** `sqlite://<path>`: the path is everything after the scheme, relative to the working directory or absolute. */
export function parseDatabaseUrl (url: string): Config['database'] {
  if (url.startsWith('sqlite://')) {
    const path = url.slice('sqlite://'.length)
    if (path === '') throw new ConfigError('Invalid configuration:\n  DATABASE_URL: sqlite:// needs a file path, e.g. sqlite://data/chatd.db')
    return { kind: 'sqlite', path }
  }
  if (/^postgres(ql)?:\/\//.test(url)) return { kind: 'postgres', url }
  throw new ConfigError(`Invalid configuration:\n  DATABASE_URL: must start with sqlite:// or postgres:// (got ${JSON.stringify(url)})`)
}
