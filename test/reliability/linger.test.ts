// The linger guard (test/helpers/linger.ts) on a test file that leaves a socket Node cannot close:
// without the guard such a process spins in its exit cleanup after its tests pass, until tap's
// timeout kills it. With it, the file's TAP output is whole, the socket is named on stderr, and
// the process exits with its tests' result. Run in a child process, so a spin shows as a child
// that does not exit rather than as this file hanging.

import { join } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'
import { runModuleSource, type ScriptRun } from '../helpers/node-script.ts'

const FILE = (guarded: boolean) => `
import t from 'tap'
import net from 'node:net'
import { once } from 'node:events'
import { exitIfLingering } from ${JSON.stringify(join(REPO_ROOT, 'test/helpers/linger.ts'))}
const done = t.test('leaves a socket behind', async t => {
  const server = net.createServer(peer => { peer.on('error', () => {}); peer.resume() })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const socket = net.connect(server.address().port, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.end()
  socket.resetAndDestroy() // fails with EINVAL while the shutdown is in flight: the handle stays
  server.close()
  t.pass('the test itself passes')
})
${guarded ? 'exitIfLingering(t, done)' : ''}
`

async function runFile (guarded: boolean): Promise<ScriptRun> {
  // The child is a test file run by itself, not one of this run's: none of tap's variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(TAP|_TAPJS|NODE_V8_COVERAGE)/.test(name)))
  return runModuleSource(FILE(guarded), { cwd: REPO_ROOT, env, killAfterMs: guarded ? 60_000 : 5_000 })
}

t.test('unguarded, the process outlives its passing tests (what the guard is for)', async t => {
  const { code, stdout } = await runFile(false)
  t.match(stdout, /ok 1 - leaves a socket behind/, 'every test passed')
  t.equal(code, null, 'and it still had to be killed')
})

t.test('guarded: whole TAP output, the leak named, exit code 0', async t => {
  const { code, stdout, stderr } = await runFile(true)
  t.match(stdout, /ok 1 - leaves a socket behind[\s\S]*1\.\.1/, 'the results and the plan')
  t.match(stderr, /handles it did not close: \["TCPSocketWrap"\]/)
  t.equal(code, 0)
})
