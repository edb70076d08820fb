// The Redis side of the limits: Lua scripts, because a script runs atomically
// on the server. Check-then-count in one step is what makes N replicas admit
// exactly N requests between them; two round trips (read, then write) would
// let two replicas both read "one slot left" and both take it.
//
// Time comes from Redis (TIME), not from the replicas, so their clock skew
// cannot move a window. One account's keys share a {hash tag}, so the scripts
// also run on Redis Cluster (all of a script's keys in one slot).
//
// Keys (K = <prefix>{a:<account id>}):
//   K:win       sorted set: request id -> admitted at (ms); the rolling minute
//   K:tok       hash: request id -> tokens (the reservation, then the real count)
//   K:m:<YYYY-MM>  the month's call counter
//
// The window algorithm mirrors memory-store.ts step by step.

/** Shared prelude: now from Redis, and the window trimmed to (now - 60 s, now]. */
const TRIM = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[1])
local cutoff = now - window
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
for i = 1, #expired, 500 do
  redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 499, #expired)))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)

local function usage ()
  local requests = redis.call('ZCARD', KEYS[1])
  local tokens = 0
  for _, amount in ipairs(redis.call('HVALS', KEYS[2])) do tokens = tokens + tonumber(amount) end
  local reset = 0
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #oldest > 0 then reset = tonumber(oldest[2]) + window - now end
  return requests, tokens, reset
end
`

/**
 * KEYS: win, tok, month counter.
 * ARGV: window ms, request id, tokens to reserve, rpm, tpm, calls per month
 * (-1 = no such limit), month seed (-1 = none given), month end (ms).
 * Returns {status, retry after ms, requests, tokens, calls this month, reset ms};
 * status is 'ok', 'requests', 'tokens', 'allowance', or just {'seed'}.
 */
export const ADMIT = TRIM + `
local id = ARGV[2]
local want = tonumber(ARGV[3])
local rpm = tonumber(ARGV[4])
local tpm = tonumber(ARGV[5])
local allowance = tonumber(ARGV[6])

-- The month's calls are counted whatever the tier, so a tier change (to one without an
-- allowance and back) cannot reset them; only a tier with an allowance refuses on them.
local stored = redis.call('GET', KEYS[3])
if not stored then
  local seed = tonumber(ARGV[7])
  if seed < 0 then return {'seed'} end
  -- Lives a day past the month's end, then goes by itself.
  redis.call('SET', KEYS[3], seed, 'PX', tonumber(ARGV[8]) - now + 86400000)
  stored = seed
end
local calls = tonumber(stored)

local requests, tokens, reset = usage()

if allowance >= 0 and calls >= allowance then
  return {'allowance', tonumber(ARGV[8]) - now, requests, tokens, calls, reset}
end

local limit = nil
local retry = 0
if rpm >= 0 and requests >= rpm then
  limit = 'requests'
  if rpm == 0 then
    retry = window
  else
    local freeing = redis.call('ZRANGE', KEYS[1], requests - rpm, requests - rpm, 'WITHSCORES')
    retry = tonumber(freeing[2]) + window - now
  end
end
if tpm >= 0 and tokens + want > tpm then
  local wait = window
  local freed = 0
  local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    freed = freed + tonumber(redis.call('HGET', KEYS[2], entries[i]) or '0')
    if tokens - freed + want <= tpm then
      wait = tonumber(entries[i + 1]) + window - now
      break
    end
  end
  if limit == nil or wait > retry then
    limit = 'tokens'
    retry = wait
  end
end
if limit then return {limit, retry, requests, tokens, calls, reset} end

redis.call('ZADD', KEYS[1], now, id)
redis.call('HSET', KEYS[2], id, want)
redis.call('PEXPIRE', KEYS[1], window + 1000)
redis.call('PEXPIRE', KEYS[2], window + 1000)
calls = redis.call('INCR', KEYS[3])
requests, tokens, reset = usage()
return {'ok', 0, requests, tokens, calls, reset}
`

/**
 * KEYS: win, tok, month counter. ARGV: window ms, request id, real tokens, refund (1/0).
 * The real count replaces the reservation while the request is still in the window.
 */
export const SETTLE = `
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
if ARGV[4] == '1' then
  local calls = redis.call('GET', KEYS[3])
  if calls and tonumber(calls) > 0 then redis.call('DECR', KEYS[3]) end
end
return 1
`

/**
 * KEYS: win, tok. ARGV: window ms, request id, tokens to add, tpm (-1 = no such limit).
 * Adds the tokens to the request's reservation if the minute's tokens stay within tpm; returns 1,
 * or 0 (nothing added). A request that has left the window adds nothing.
 */
export const EXTEND = TRIM + `
local id = ARGV[2]
local extra = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local requests, tokens, reset = usage()
if tpm >= 0 and tokens + extra > tpm then return 0 end
local have = redis.call('HGET', KEYS[2], id)
if have then redis.call('HSET', KEYS[2], id, tonumber(have) + extra) end
return 1
`

/** KEYS: win, tok, month counter. ARGV: window ms. Returns {requests, tokens, calls (-1 = untracked), reset ms}. */
export const PEEK = TRIM + `
local requests, tokens, reset = usage()
local calls = redis.call('GET', KEYS[3])
return {requests, tokens, calls and tonumber(calls) or -1, reset}
`
