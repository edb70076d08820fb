// The outage tests' fault proxy cuts connections with RST; what it must never do is leave a
// socket that Node will not close, which keeps the test process alive after its tests pass (the
// process spins in its exit cleanup until tap's timeout). Each case runs in a child process, so a
// socket left behind shows as a child that does not exit, instead of hanging this file.

import { join } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'
import { runModuleSource } from '../helpers/node-script.ts'

const CASE = `
import { once } from 'node:events'
import net from 'node:net'
import { reset } from ${JSON.stringify(join(REPO_ROOT, 'test/helpers/fault-proxy.ts'))}
const server = net.createServer(peer => { peer.on('error', e => console.log('peer', e.code)); peer.resume() })
server.listen(0, '127.0.0.1')
await once(server, 'listening')
const socket = net.connect(server.address().port, '127.0.0.1')
socket.on('error', () => {})
await once(socket, 'connect')
if (process.argv.includes('ending')) socket.end() // its shutdown is in flight when the reset comes
reset(socket)
await once(socket, 'close')
console.log('closed')
server.close()
`

async function runCase (how: 'open' | 'ending'): Promise<{ code: number | null; output: string }> {
  // Bounded: a child that spins at exit is killed, and its exit code says so.
  const { code, stdout, stderr } = await runModuleSource(CASE, { args: [how], killAfterMs: 60_000 })
  process.stderr.write(stderr)
  return { code, output: stdout }
}

t.test('an open connection is cut with RST and closed', async t => {
  const { code, output } = await runCase('open')
  t.match(output, /peer ECONNRESET/, 'the other side sees a reset, as from a server that died')
  t.match(output, /closed/)
  t.equal(code, 0, 'and the process exits')
})

t.test('a connection already ending is closed too, and the process still exits', async t => {
  const { code, output } = await runCase('ending')
  t.match(output, /closed/, 'the socket closes (a reset now would fail with EINVAL and leave it open)')
  t.equal(code, 0, 'the process exits instead of spinning in its exit cleanup')
})
