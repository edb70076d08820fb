// The linger guard (test/helpers/linger.ts) on test files that leave a handle open. Two kinds:
//
// - a socket Node cannot close: without the guard such a process spins in its exit cleanup after
//   its tests pass, until tap's timeout kills it;
// - a server left listening: the event loop never empties.
//
// Guarded, the file's TAP output is whole and the process ends; the leak fails the file (a failing
// assertion, or exit code 1, which tap reports as the file's failure) unless the file names that
// kind of handle as known, with its reason. Each case runs in a child process, so a spin shows as
// a child that does not exit rather than as this file hanging.

import { join } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'
import { runModuleSource, type ScriptRun } from '../helpers/node-script.ts'

const LEAKS = {
  // resetAndDestroy() fails with EINVAL while the shutdown is in flight: the handle stays.
  'an unclosable socket': `
    const server = net.createServer(peer => { peer.on('error', () => {}); peer.resume() })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    const socket = net.connect(server.address().port, '127.0.0.1')
    socket.on('error', () => {})
    await once(socket, 'connect')
    socket.end()
    socket.resetAndDestroy()
    server.close()`,
  'a listening server': `
    net.createServer().listen(0, '127.0.0.1')`,
} as const

/** A test file whose one test passes and leaves `leak` open; guarded with `guard`'s options, or not at all. */
const FILE = (leak: keyof typeof LEAKS, guard?: string) => `
import t from 'tap'
import net from 'node:net'
import { once } from 'node:events'
import { exitIfLingering } from ${JSON.stringify(join(REPO_ROOT, 'test/helpers/linger.ts'))}
const done = t.test('leaves ${leak} behind', async t => {
  ${LEAKS[leak]}
  t.pass('the test itself passes')
})
${guard === undefined ? '' : `exitIfLingering(t, done, ${guard})`}
`

async function runFile (leak: keyof typeof LEAKS, guard?: string): Promise<ScriptRun> {
  // The child is a test file run by itself, not one of this run's: none of tap's variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(TAP|_TAPJS|NODE_V8_COVERAGE)/.test(name)))
  return runModuleSource(FILE(leak, guard), { cwd: REPO_ROOT, env, killAfterMs: guard === undefined ? 5_000 : 60_000 })
}

t.test('an unclosable socket, unguarded: the process outlives its passing tests (what the guard is for)', async t => {
  const { code, stdout } = await runFile('an unclosable socket')
  t.match(stdout, /ok 1 - leaves an unclosable socket behind/, 'every test passed')
  t.equal(code, null, 'and it still had to be killed')
})

t.test('an unclosable socket named as known: whole TAP output, the socket and its reason named, exit code 0', async t => {
  const { code, stdout, stderr } = await runFile('an unclosable socket', "{ known: { TCPSocketWrap: 'reset while ending, what this test is about' } }")
  t.match(stdout, /ok 1 - leaves an unclosable socket behind[\s\S]*1\.\.1/, 'the results and the plan')
  t.notMatch(stdout, /not ok/)
  t.match(stderr, /handles it did not close: \["TCPSocketWrap"\], known to this file \(TCPSocketWrap: reset while ending/)
  t.equal(code, 0)
})

t.test('an unclosable socket not named: whole TAP output, then the leak named and exit code 1', async t => {
  const { code, stdout, stderr } = await runFile('an unclosable socket', '{}')
  t.match(stdout, /ok 1 - leaves an unclosable socket behind[\s\S]*1\.\.1/, 'the results and the plan')
  t.match(stderr, /handles it did not close: \["TCPSocketWrap"\]; a leak \(\["TCPSocketWrap"\] not named as known/)
  t.equal(code, 1, 'the file fails')
})

t.test('another kind named as known does not excuse this one', async t => {
  const { code, stderr } = await runFile('an unclosable socket', "{ known: { TCPServerWrap: 'some other reason' } }")
  t.match(stderr, /a leak \(\["TCPSocketWrap"\] not named as known/)
  t.equal(code, 1, 'the file fails')
})

t.test('a listening server not named: a failing assertion naming it, the plan, exit code 1', async t => {
  const { code, stdout } = await runFile('a listening server', '{ graceMs: 200 }')
  t.match(stdout, /ok 1 - leaves a listening server behind/, 'the test itself passed')
  t.match(stdout, /not ok 2 - test process still alive 200 ms after its tests ended; open: \["TCPServerWrap"\]: a leak/, 'the leak is a failure in the TAP output')
  t.match(stdout, /\n1\.\.2\n/, 'and the plan counts it')
  t.equal(code, 1, 'the file fails')
})

t.test('a listening server named as known: the results, the plan, exit code 0', async t => {
  const { code, stdout, stderr } = await runFile('a listening server', "{ graceMs: 200, known: { TCPServerWrap: 'left for the next file' } }")
  t.match(stdout, /ok 1 - leaves a listening server behind[\s\S]*\n1\.\.1\n/)
  t.notMatch(stdout, /not ok/)
  t.match(stderr, /still alive 200 ms after its tests ended; open: \["TCPServerWrap"\], known to this file \(TCPServerWrap: left for the next file\)/)
  t.equal(code, 0)
})
