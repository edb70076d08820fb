// Clients that send slowly, or hold connections, against a server with short
// receive deadlines (src/api/connections.ts): a body that never finishes, a
// header trickled a byte at a time, a connection that sends nothing, all get
// 408 in the API's error shape and a closed socket; an idle keep-alive
// connection is closed; past the connection caps a connection gets 503 with
// Retry-After and a closed socket, never a reset, and what it may still cost
// (time, bytes, sockets at once) is bounded. A streamed reply that takes
// longer than the whole-request deadline still completes: the deadline covers
// receiving the request, not answering.
//
// Raw sockets (net.connect), a bounded number of them; every wait ends on an
// event the server causes (its answer, its closing the socket), and the
// assertions are about what arrived, never about how long it took.

import { EventEmitter } from 'node:events'
import http from 'node:http'
import net from 'node:net'
import { PassThrough } from 'node:stream'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { clientOf, ConnectionGuard, type RefusalDrain } from '../../src/api/connections.ts'
import { DEFAULT_CONNECTION_LIMITS } from '../../src/config.ts'
import { buildTestApp, chatBody, type TestApp } from '../helpers/app.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const SHORT = { HEADERS_TIMEOUT_MS: '200', REQUEST_TIMEOUT_MS: '400', KEEP_ALIVE_TIMEOUT_MS: '200' }

async function listening (app: TestApp['app']): Promise<number> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return (app.server.address() as net.AddressInfo).port
}

interface Outcome {
  /** Everything the server sent. */
  data: string
  /** Whether the server closed the connection (always true once the promise settles; kept for the assertion's message). */
  closed: boolean
  error?: string
}

/**
 * Opens a connection, lets `act` write to it, and resolves with what came back
 * once the socket has closed. `halfOpen`: the client does not end its side
 * when the server ends its own (a client that never closes).
 */
function rawClient (port: number, act: (socket: net.Socket) => void, opts: { halfOpen?: boolean } = {}): Promise<Outcome> {
  return new Promise(resolve => {
    let data = ''
    let error: string | undefined
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: opts.halfOpen ?? false }, () => act(socket))
    socket.setEncoding('utf8')
    socket.on('data', chunk => { data += chunk })
    socket.on('error', err => { error = (err as NodeJS.ErrnoException).code ?? err.message })
    socket.on('close', () => resolve({ data, closed: true, error }))
  })
}

/** The status line's code and the JSON body of a raw HTTP response. */
function parseResponse (raw: string): { status: number; headers: string; body: unknown } {
  const [head, ...rest] = raw.split('\r\n\r\n')
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1])
  const text = rest.join('\r\n\r\n')
  return { status, headers: head, body: text === '' ? undefined : JSON.parse(text) }
}

function isTimeoutAnswer (t: Test, outcome: Outcome, label: string): void {
  const res = parseResponse(outcome.data)
  t.equal(res.status, 408, `${label}: 408`)
  t.match(res.headers, /\r\nConnection: close/i, `${label}: Connection: close`)
  t.same(res.body, { error: { message: 'The request did not arrive in time; the connection is closed (see HEADERS_TIMEOUT_MS and REQUEST_TIMEOUT_MS).', type: 'invalid_request_error', param: null, code: 'request_timeout' } }, `${label}: in the API's error shape`)
  t.ok(outcome.closed, `${label}: the socket is closed`)
}

t.test('slow senders get 408 in the API shape and a closed socket', { timeout: 60_000 }, async t => {
  const { app, key, metrics } = await buildTestApp(t, { env: SHORT })
  const port = await listening(app)

  // The probe's first client: a valid key, Content-Length 100000, then "{" and silence.
  const body = await rawClient(port, socket => socket.write(
    `POST /api/v1/chat/completions HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`))
  isTimeoutAnswer(t, body, 'a body that never finishes')

  // The probe's second: no key, one header byte at a time, for as long as the socket stays open.
  let sent = 0
  const trickle = await rawClient(port, socket => {
    socket.write('GET /api/v1/models HTTP/1.1\r\nHost: chatd\r\nX-Slow: ')
    const timer = setInterval(() => { if (socket.writable) { socket.write('a'); sent++ } }, 20)
    socket.once('close', () => clearInterval(timer))
  })
  isTimeoutAnswer(t, trickle, 'a trickled header')
  t.ok(sent < 10_000, 'the trickle was cut off by the server, not by running out')

  // A connection that never sends a byte is a request that never starts: the headers deadline applies.
  isTimeoutAnswer(t, await rawClient(port, () => {}), 'a silent connection')

  // A body trickled a byte at a time, headers complete: the whole-request deadline applies.
  const slowBody = await rawClient(port, socket => {
    socket.write(`POST /api/v1/chat/completions HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n`)
    const timer = setInterval(() => { if (socket.writable) socket.write(' ') }, 20)
    socket.once('close', () => clearInterval(timer))
  })
  isTimeoutAnswer(t, slowBody, 'a trickled body')

  // No key, headers complete, the body trickled: refused at once, and the connection closed
  // instead of kept open for a body nobody will read.
  const noKey = await rawClient(port, socket => {
    socket.write('POST /api/v1/chat/completions HTTP/1.1\r\nHost: chatd\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{')
    const timer = setInterval(() => { if (socket.writable) socket.write(' ') }, 20)
    socket.once('close', () => clearInterval(timer))
  })
  const refused = parseResponse(noKey.data)
  t.equal(refused.status, 401, 'no key: 401')
  t.match(refused.headers, /\r\nconnection: close/i, 'no key: the connection is closed after the answer')
  t.match(refused.body, { error: { code: 'missing_api_key' } })

  const counted = (await metrics.registry.getSingleMetricAsString('chatd_errors_total')).match(/code="request_timeout"\} (\d+)/)
  t.equal(Number(counted?.[1]), 4, 'each counted in chatd_errors_total')
})

t.test('an idle keep-alive connection is closed after KEEP_ALIVE_TIMEOUT_MS', { timeout: 60_000 }, async t => {
  const { app } = await buildTestApp(t, { env: SHORT })
  const port = await listening(app)
  const idle = await rawClient(port, socket => socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n'))
  const res = parseResponse(idle.data)
  t.equal(res.status, 200, 'the request was answered')
  t.match(res.headers, /\r\nConnection: keep-alive/i, 'and the connection kept open for the next one')
  t.ok(idle.closed, 'then closed by the server while idle')
  t.notMatch(idle.data, /408/, 'with no second answer: nothing was in progress')
})

t.test('a streamed reply that outlasts REQUEST_TIMEOUT_MS is not cut', { timeout: 60_000 }, async t => {
  let release!: () => void
  const gate = new Promise<void>(resolve => { release = resolve })
  const { app, key } = await buildTestApp(t, { env: SHORT, backends: [new ScriptedBackend({ firstGate: gate, words: ['Once', ' upon', ' a', ' time'] })] })
  const port = await listening(app)

  const reply = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/api/v1/chat/completions', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } }, res => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', chunk => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode!, text }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(JSON.stringify(chatBody({ stream: true })))
  })

  // The stream waits at the gate. A slow client started after it gets its 408 only once
  // REQUEST_TIMEOUT_MS has passed since it began, so by then the stream's own request is
  // older than that and Node has checked the deadlines since: had they applied to a
  // request already received, the stream would be cut now.
  const slow = await rawClient(port, socket => socket.write(
    `POST /api/v1/chat/completions HTTP/1.1\r\nHost: chatd\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{`))
  t.equal(parseResponse(slow.data).status, 408, 'the slow client next to it was timed out')
  // Once more, to be past a second check of the deadlines.
  t.equal(parseResponse((await rawClient(port, () => {})).data).status, 408)

  release()
  const { status, text } = await reply
  t.equal(status, 200)
  t.match(text, /"content":"Once"/)
  t.match(text, /"finish_reason":"stop"/)
  t.ok(text.trimEnd().endsWith('data: [DONE]'), 'the stream ran to [DONE]')
})

t.test('connection caps: per client address, and per server', { timeout: 60_000 }, async t => {
  for (const [label, env] of [
    ['MAX_CONNECTIONS_PER_ADDRESS', { MAX_CONNECTIONS_PER_ADDRESS: '3', MAX_CONNECTIONS: '0' }],
    ['MAX_CONNECTIONS', { MAX_CONNECTIONS_PER_ADDRESS: '0', MAX_CONNECTIONS: '3' }],
  ] as const) {
    await t.test(label, async t => {
      const { app } = await buildTestApp(t, { env })
      const port = await listening(app)
      // Three held open: each has been answered once, so the server has counted it.
      const held: net.Socket[] = []
      for (let i = 0; i < 3; i++) {
        const socket = net.connect(port, '127.0.0.1')
        await new Promise<void>(resolve => {
          socket.once('connect', () => socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n'))
          socket.once('data', () => resolve())
        })
        held.push(socket)
      }
      const fourth = await rawClient(port, socket => {
        socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n')
        // As an HTTP client does once it has a Connection: close answer.
        socket.once('data', () => socket.end())
      })
      const refused = parseResponse(fourth.data)
      t.equal(refused.status, 503, 'the fourth connection is answered 503')
      t.match(refused.headers, /\r\nRetry-After: 1\r\n/i, 'with Retry-After')
      t.match(refused.headers, /\r\nConnection: close/i, 'and Connection: close')
      t.same(refused.body, { error: { message: `Too many open connections${label === 'MAX_CONNECTIONS' ? '' : ' from your address'} (${label}); retry shortly.`, type: 'server_error', param: null, code: 'server_overloaded' } }, 'in the API\'s error shape')
      t.equal(fourth.error, undefined, 'not reset')
      t.ok(fourth.closed)

      // One of the three goes; a new connection is served again (the server may take a moment to see the close).
      const gone = new Promise(resolve => held[0].once('close', resolve))
      held[0].destroy()
      await gone
      let answer = ''
      for (let attempt = 0; attempt < 50 && !answer.startsWith('HTTP/1.1 200'); attempt++) {
        answer = (await rawClient(port, socket => socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\nConnection: close\r\n\r\n'))).data
        if (!answer) await new Promise(resolve => setTimeout(resolve, 20))
      }
      t.match(answer, /^HTTP\/1\.1 200/, 'a connection is served once one is free')
      for (const socket of held) socket.destroy()
    })
  }
})

t.test('a burst past the per-address cap: every client gets an answer, none a reset', { timeout: 60_000 }, async t => {
  const { app, metrics } = await buildTestApp(t, { env: { MAX_CONNECTIONS_PER_ADDRESS: '8', MAX_CONNECTIONS: '0' } })
  const port = await listening(app)
  // A keep-alive agent, as SDKs use: answered connections stay open, so the
  // burst's connections are all open at once and the cap is really reached.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 100 })
  t.teardown(() => agent.destroy())
  const outcomes = await Promise.all(Array.from({ length: 30 }, () => new Promise<{ status?: number; retryAfter?: string; body?: unknown; error?: string }>(resolve => {
    const req = http.get({ port, host: '127.0.0.1', path: '/healthz', agent }, res => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', chunk => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode, retryAfter: res.headers['retry-after'], body: JSON.parse(text) }))
      res.on('error', err => resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message }))
    })
    req.on('error', err => resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message }))
  })))
  t.same(outcomes.filter(o => o.error !== undefined), [], 'no client got a connection reset or any other error')
  const served = outcomes.filter(o => o.status === 200)
  const refused = outcomes.filter(o => o.status === 503)
  t.equal(served.length + refused.length, 30, 'each got 200 or 503')
  t.equal(served.length, 8, 'as many served as the cap')
  for (const o of refused) {
    t.equal(o.retryAfter, '1', '503 with Retry-After')
    t.match(o.body, { error: { type: 'server_error', code: 'server_overloaded', param: null } })
  }
  const counted = (await metrics.registry.getSingleMetricAsString('chatd_errors_total')).match(/code="too_many_connections"\} (\d+)/)
  t.equal(Number(counted?.[1]), 22, 'each refusal counted in chatd_errors_total')
})

t.test('draining a refused connection is bounded: in time, in bytes, and in how many at once', { timeout: 60_000 }, async t => {
  const limits = { ...DEFAULT_CONNECTION_LIMITS, maxConnections: 1, maxConnectionsPerAddress: 0 }
  const serve = async (drain: Partial<RefusalDrain>): Promise<{ port: number; guard: ConnectionGuard }> => {
    const guard = new ConnectionGuard(limits, { perAddress: false, drain })
    const app = Fastify({ clientErrorHandler: guard.clientError })
    guard.attach(app)
    app.get('/healthz', async () => ({ ok: true }))
    t.teardown(() => app.close())
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: (app.server.address() as net.AddressInfo).port, guard }
  }
  /** The one connection the cap admits, held open while the test runs. */
  const hold = async (port: number): Promise<void> => {
    const socket = net.connect(port, '127.0.0.1')
    t.teardown(() => socket.destroy())
    await new Promise<void>(resolve => {
      socket.once('connect', () => socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n'))
      socket.once('data', () => resolve())
    })
  }

  await t.test('a refused client that trickles bytes and never closes is closed by the server', async t => {
    const { port, guard } = await serve({ ms: 200 })
    await hold(port)
    let sent = 0
    const trickle = await rawClient(port, socket => {
      const timer = setInterval(() => { if (socket.writable) { socket.write('a'); sent++ } }, 20)
      socket.once('close', () => clearInterval(timer))
    }, { halfOpen: true })
    t.equal(parseResponse(trickle.data).status, 503, 'answered')
    t.ok(trickle.closed, 'then closed by the server, though the client never closed its side')
    t.ok(sent < 10_000, 'cut off by the server, not by running out')
    t.equal(guard.draining, 0, 'nothing left draining')
  })

  await t.test('a refused client that keeps sending is closed after the byte bound', async t => {
    const { port } = await serve({ ms: 600_000, bytes: 64 * 1024 })
    await hold(port)
    let written = 0
    const flood = await rawClient(port, socket => {
      const chunk = Buffer.alloc(16 * 1024, 'a')
      const more = (): void => {
        while (socket.writable && written < 64 * 2 ** 20) {
          written += chunk.length
          if (!socket.write(chunk)) return
        }
      }
      socket.on('drain', more)
      more()
    }, { halfOpen: true })
    t.equal(parseResponse(flood.data.slice(0, flood.data.indexOf('}}') + 2)).status, 503, 'answered')
    t.ok(written < 64 * 2 ** 20, `closed by the server long before the client ran out (${written} bytes written)`)
  })

  await t.test('past the number of connections that may drain at once, the rest are closed unanswered', async t => {
    const { port, guard } = await serve({ ms: 600_000, sockets: 2 })
    await hold(port)
    const answered: net.Socket[] = []
    for (let i = 0; i < 2; i++) {
      // Half open: they keep their side open after the answer, so they stay draining.
      const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
      t.teardown(() => socket.destroy())
      await new Promise(resolve => socket.once('data', resolve))
      answered.push(socket)
    }
    t.equal(guard.draining, 2, 'two refused connections draining')
    for (let i = 0; i < 3; i++) {
      const extra = await rawClient(port, () => {})
      t.equal(extra.data, '', 'a third one is closed without an answer')
      t.equal(guard.draining, 2, 'and never more than two drain at once')
    }
    const gone = answered.map(socket => new Promise(resolve => socket.once('close', resolve)))
    for (const socket of answered) socket.end()
    await Promise.all(gone)
    let after = await rawClient(port, socket => socket.once('data', () => socket.end()))
    // The server may take a moment to see the two close.
    for (let attempt = 0; attempt < 50 && after.data === ''; attempt++) {
      await new Promise(resolve => setTimeout(resolve, 20))
      after = await rawClient(port, socket => socket.once('data', () => socket.end()))
    }
    t.equal(parseResponse(after.data).status, 503, 'once they have closed, a refused connection is answered again')
  })
})

t.test('behind a proxy (TRUST_PROXY set) the per-address cap is not applied', { timeout: 60_000 }, async t => {
  const { app } = await buildTestApp(t, { env: { MAX_CONNECTIONS_PER_ADDRESS: '1', TRUST_PROXY: '127.0.0.1' } })
  const port = await listening(app)
  const first = net.connect(port, '127.0.0.1')
  await new Promise(resolve => first.once('connect', resolve))
  const second = await rawClient(port, socket => socket.write('GET /healthz HTTP/1.1\r\nHost: chatd\r\nConnection: close\r\n\r\n'))
  t.match(second.data, /^HTTP\/1\.1 200/, 'every connection comes from the proxy: not capped per address')
  first.destroy()
})

t.test('the per-address cap counts an IPv6 client by its /64: one host cannot take the server\'s connections address by address', async t => {
  t.same(['2001:db8:1:2::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:DB8:1:3::1', '::ffff:192.0.2.7', '192.0.2.7', '192.0.2.8'].map(remoteAddress => clientOf({ remoteAddress })),
    ['2001:db8:1:2::', '2001:db8:1:2::', '2001:db8:1:3::', '192.0.2.7', '192.0.2.7', '192.0.2.8'], 'a /64 is one client; an IPv4 address is itself, mapped into IPv6 or not')

  // Loopback has one IPv6 address, so the connections are sockets handed to the guard as the
  // server would: each with its address, the ones admitted held open.
  class Connection extends PassThrough {
    answer = ''
    readonly remoteAddress: string
    constructor (remoteAddress: string) {
      super()
      this.remoteAddress = remoteAddress
      this.setEncoding('utf8')
      this.on('data', chunk => { this.answer += chunk })
    }

    destroySoon (): void { this.destroy() }
  }
  const server = new EventEmitter()
  const refused: string[] = []
  const guard = new ConnectionGuard({ ...DEFAULT_CONNECTION_LIMITS, maxConnections: 0, maxConnectionsPerAddress: 2 }, { perAddress: true, onRefused: code => refused.push(code) })
  guard.attach({ server, log: undefined, addHook: () => {} } as unknown as Parameters<ConnectionGuard['attach']>[0])
  const connect = (address: string): Connection => {
    const socket = new Connection(address)
    t.teardown(() => socket.destroy())
    server.emit('connection', socket)
    return socket
  }
  const host = ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2::3', '2001:db8:1:2:abcd::9'].map(connect)
  await new Promise(resolve => setImmediate(resolve))
  t.same(host.map(s => s.answer === ''), [true, true, false, false], 'two connections from the /64, then 503s from its other addresses')
  t.match(host[2].answer, /^HTTP\/1\.1 503 [^]*server_overloaded/)
  t.same(refused, ['too_many_connections', 'too_many_connections'])
  const others = ['2001:db8:1:3::1', '::ffff:192.0.2.7', '192.0.2.8'].map(connect)
  await new Promise(resolve => setImmediate(resolve))
  t.same(others.map(s => s.answer), ['', '', ''], 'another /64 and IPv4 clients are not held back')
  host[0].destroy()
  await new Promise(resolve => setImmediate(resolve))
  const again = connect('2001:db8:1:2::77')
  await new Promise(resolve => setImmediate(resolve))
  t.equal(again.answer, '', 'a connection from the /64 is admitted again once one of its two has closed')
})
