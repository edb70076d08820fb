// A test file whose process does not end after its tests are done holds tap until its per-file
// timeout kills it, and the file fails though every assertion passed. Two ways it happens:
//
// - The event loop stays alive (a handle left open). Once the file's last subtest has settled,
//   a timer names what is open, ends the TAP output and the process.
// - The loop empties, but a handle Node cannot close spins the process in its exit cleanup,
//   where no JavaScript runs: postgres-outage.test.ts did so (a socket reset while it was ending;
//   see reset() in fault-proxy.ts). At beforeExit, with tap's output written, anything still
//   open beyond the process's own stdio is named and the process leaves through process.exit(),
//   which skips that cleanup.
//
// Either way a handle left open is a leak, and the file fails: in the first case with a failing
// assertion in its TAP output, in the second (tap's output is already ended) with exit code 1,
// which tap reports as the file's failure. Only the kinds of handle the file names in `known`,
// each with the reason it cannot close them, are let through (named on stderr), so that a leak
// nobody has explained cannot pass CI unseen.
//
// The timer is armed when the file's tests have finished, not from a teardown of the root test:
// tap ends the root test only once the event loop is empty, which is exactly what a leak prevents.

import type { TAP } from 'tap'

/**
 * What a test process holds open by itself: its stdout and the channel to tap (pipes, or a
 * terminal). A pipe of the file's own left open is therefore not seen; a child process's pipes
 * come with its ProcessWrap, which is.
 */
const OWN_STDIO = new Set(['PipeWrap', 'TTYWrap'])

export interface LingerOptions {
  /** How long after the last subtest settled the process may still be alive (ms). */
  graceMs?: number
  /**
   * Kinds of handle (as process.getActiveResourcesInfo() names them, e.g. 'TCPSocketWrap') this
   * file knows it may leave open, each with the reason it cannot close them. Any other kind left
   * open fails the file.
   */
  known?: Record<string, string>
}

/** Guards the file's end; `done` is its last subtest. */
export function exitIfLingering (root: TAP, done: Promise<unknown>, options: LingerOptions = {}): void {
  const { graceMs = 10_000, known = {} } = options
  /** The handles still open, and those of them the file did not name as known. */
  const leftOpen = (): { open: string[]; unknown: string[] } => {
    const open = process.getActiveResourcesInfo().filter(resource => !OWN_STDIO.has(resource))
    return { open, unknown: open.filter(resource => !Object.hasOwn(known, resource)) }
  }
  const reasons = (open: string[]): string => [...new Set(open)].map(kind => `${kind}: ${known[kind]}`).join('; ')
  void done.finally(() => {
    setTimeout(() => {
      const { open, unknown } = leftOpen()
      const what = `test process still alive ${graceMs} ms after its tests ended; open: ${JSON.stringify(open)}`
      if (unknown.length > 0) {
        root.fail(`${what}: a leak (${JSON.stringify(unknown)} not named as known to exitIfLingering)`)
      } else {
        process.stderr.write(`${what}, known to this file (${reasons(open)})\n`)
      }
      root.end() // the plan and the results, as tap would have written them
      setImmediate(() => process.exit())
    }, graceMs).unref()
  })
  // Registered after tap's own beforeExit listener (the file imported tap first), so the root test
  // has ended and its output is written when this runs: a leak can only fail the exit code now.
  process.once('beforeExit', () => {
    const { open, unknown } = leftOpen()
    if (open.length === 0) return // nothing that could keep the exit cleanup from finishing
    if (unknown.length > 0) {
      process.stderr.write(`test process ending with handles it did not close: ${JSON.stringify(open)}; a leak (${JSON.stringify(unknown)} not named as known to exitIfLingering): failing the file\n`)
      process.exit(1)
    }
    process.stderr.write(`test process ending with handles it did not close: ${JSON.stringify(open)}, known to this file (${reasons(open)})\n`)
    process.exit()
  })
}
