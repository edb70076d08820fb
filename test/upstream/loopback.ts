// A scripted HTTP server on 127.0.0.1 for one test: it records every request
// (method, path, headers, body) and lets the test answer however it likes,
// including badly (slow, cut off, malformed). It also counts requests still
// open, so a test can check that chatd left nothing running. Closed when the
// test ends.

import http from 'node:http'
import { once } from 'node:events'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

export interface RecordedRequest {
  method: string
  path: string
  headers: http.IncomingHttpHeaders
  body: string
}

export type Handler = (req: http.IncomingMessage, res: http.ServerResponse, recorded: RecordedRequest, index: number) => void | Promise<void>

export interface Loopback {
  /** http://127.0.0.1:<port> */
  url: string
  requests: RecordedRequest[]
  /** Requests whose response has not closed yet. */
  readonly open: number
  /** Resolves once no request is open (fails the wait after `ms`). */
  settled: (ms?: number) => Promise<boolean>
  /** Requests whose connection closed before the response was complete (the client gave up). */
  readonly abandoned: number
}

export async function loopbackServer (t: Test, handler: Handler): Promise<Loopback> {
  const requests: RecordedRequest[] = []
  const sockets = new Set<Socket>()
  let open = 0
  let abandoned = 0
  const server = http.createServer(async (req, res) => {
    open++
    res.once('close', () => {
      open--
      if (!res.writableFinished) abandoned++
    })
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const recorded = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') }
    requests.push(recorded)
    try {
      await handler(req, res, recorded, requests.length - 1)
    } catch {
      res.destroy()
    }
  })
  server.on('connection', socket => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    await new Promise(resolve => server.close(resolve))
  })
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    get open () { return open },
    get abandoned () { return abandoned },
    async settled (ms = 5000) {
      const deadline = Date.now() + ms
      // eslint-disable-next-line no-unmodified-loop-condition -- connections closing elsewhere change it
      while (open > 0 && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 10))
      return open === 0
    },
  }
}

/** Writes an SSE response: status, headers, then the frames (strings are sent as `data: <frame>\n\n`). */
export function sseHead (res: http.ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
}

export function sseData (res: http.ServerResponse, value: unknown): void {
  res.write(`data: ${typeof value === 'string' ? value : JSON.stringify(value)}\n\n`)
}

/** An OpenAI chat.completion.chunk with the given delta. */
export function chunk (delta: Record<string, unknown>, finishReason: string | null = null, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id: 'chatcmpl-upstream', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finishReason }], ...extra }
}

/** A well-formed streamed reply of `pieces` as content deltas, with usage when given. */
export function streamReply (res: http.ServerResponse, pieces: Array<Record<string, unknown>>, opts: { usage?: Record<string, number>; finish?: string } = {}): void {
  sseHead(res)
  sseData(res, chunk({ role: 'assistant', content: '' }))
  for (const delta of pieces) sseData(res, chunk(delta))
  sseData(res, chunk({}, opts.finish ?? 'stop'))
  if (opts.usage) sseData(res, { id: 'chatcmpl-upstream', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: opts.usage })
  sseData(res, '[DONE]')
  res.end()
}
