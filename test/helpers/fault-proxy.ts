// A TCP proxy for outage tests: chatd talks to PostgreSQL (or anything) through
// it, and the test pulls the plug. `down()` is what chatd sees when the server
// restarts: every open connection is cut and new ones are refused (the port
// closes, so connecting gets ECONNREFUSED); `up()` listens again on the same
// port. `blackhole()` is the nastier outage of a network partition: open
// connections stop carrying anything either way and new ones are accepted but
// never answered, so only the client's own timeouts end the wait; `up()` then
// cuts them (a partition long enough for TCP to give up). The shared server
// behind it is never touched.

import { once } from 'node:events'
import { connect, createServer, type Server, type Socket } from 'node:net'
import type { Test } from 'tap'

export type ProxyMode = 'forward' | 'down' | 'blackhole'

export interface FaultProxy {
  /** The port to connect to instead of the target's. */
  port: number
  readonly mode: ProxyMode
  /** Connections accepted so far (each is one pooled database connection). */
  readonly accepted: number
  /** Cuts every connection and refuses new ones until up(). */
  down: () => Promise<void>
  /** Freezes every open connection; new ones are accepted and then left unanswered. */
  blackhole: () => Promise<void>
  /** Forwards again. */
  up: () => Promise<void>
}

/**
 * Cuts a connection with RST, as a server process that died would leave its client. Not on a
 * socket that is already ending (pipe() ends one when its other side ends): Node's
 * resetAndDestroy() on a socket whose shutdown is still in flight fails with EINVAL and leaves
 * its handle marked closing but never closed, and the process then spins forever in its exit
 * cleanup after every test has passed (reproduced on Node 24.21: end(), then resetAndDestroy()
 * in the same tick). Such a socket is destroyed plainly: it was closing anyway; so is one still
 * connecting, whose reset would wait for the connection and could meet the same end().
 */
export function reset (socket: Socket): void {
  if (socket.writableEnded || socket.connecting) socket.destroy()
  else socket.resetAndDestroy()
}

export async function faultProxy (t: Test, target: { host: string; port: number }): Promise<FaultProxy> {
  let mode: ProxyMode = 'forward'
  let accepted = 0
  const open = new Set<Socket>()
  const track = (socket: Socket): void => {
    open.add(socket)
    socket.once('close', () => open.delete(socket))
  }
  const cutAll = (): void => {
    for (const socket of open) reset(socket)
  }

  const pairs = new Set<[Socket, Socket]>()
  const freeze = (): void => {
    for (const [client, server] of pairs) {
      client.unpipe(server)
      server.unpipe(client)
      client.pause()
      server.pause()
    }
  }

  const onConnection = (client: Socket): void => {
    accepted++
    track(client)
    client.on('error', () => {})
    if (mode === 'down') {
      // Accepted in the instant before the port closed: refused all the same.
      reset(client)
      return
    }
    if (mode === 'blackhole') {
      client.pause() // accepted, never answered
      return
    }
    const server = connect(target)
    track(server)
    const pair: [Socket, Socket] = [client, server]
    pairs.add(pair)
    server.on('error', () => reset(client))
    client.on('error', () => reset(server))
    client.pipe(server)
    server.pipe(client)
    client.once('close', () => { pairs.delete(pair); server.destroy() })
    server.once('close', () => { pairs.delete(pair); client.destroy() })
  }

  let listener: Server = createServer(onConnection)
  listener.listen(0, '127.0.0.1')
  await once(listener, 'listening')
  const port = (listener.address() as { port: number }).port
  const listening = (): boolean => listener.listening

  const listen = async (): Promise<void> => {
    if (listening()) return
    listener = createServer(onConnection)
    listener.listen(port, '127.0.0.1')
    await once(listener, 'listening')
  }
  const unlisten = async (): Promise<void> => {
    if (!listening()) return
    await new Promise(resolve => listener.close(resolve).once('error', resolve))
  }

  const proxy: FaultProxy = {
    port,
    get mode () { return mode },
    get accepted () { return accepted },
    async down () {
      mode = 'down'
      const closed = unlisten()
      cutAll()
      await closed
    },
    async blackhole () {
      mode = 'blackhole'
      freeze()
      await listen()
    },
    async up () {
      mode = 'forward'
      cutAll() // frozen and unanswered connections would otherwise hang around forever
      await listen()
    },
  }
  t.teardown(async () => {
    mode = 'down'
    cutAll()
    await unlisten()
  })
  return proxy
}
