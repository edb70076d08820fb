// A test file whose process does not end after its tests are done holds tap until its per-file
// timeout kills it, and the file fails though every assertion passed. Two ways it happens:
//
// - The event loop stays alive (a handle left open). Once the file's last subtest has settled,
//   a timer names what is open on stderr, ends the TAP output and the process.
// - The loop empties, but a handle Node cannot close spins the process in its exit cleanup,
//   where no JavaScript runs: postgres-outage.test.ts did so (a socket reset while it was ending;
//   see reset() in fault-proxy.ts). At beforeExit, with tap's output written, anything still
//   open beyond the process's own stdio is named on stderr and the process leaves through
//   process.exit(), which skips that cleanup.
//
// grammar-isolation.test.ts did not end once in a whole-suite run, never when run alone; which of
// the two it was is not known, so it has both.
//
// The timer is armed when the file's tests have finished, not from a teardown of the root test:
// tap ends the root test only once the event loop is empty, which is exactly what a leak prevents.

import type { TAP } from 'tap'

/** What a test process holds open by itself: its stdout and the channel to tap (pipes, or a terminal). */
const OWN_STDIO = new Set(['PipeWrap', 'TTYWrap'])

/** Guards the file's end; `done` is its last subtest. */
export function exitIfLingering (root: TAP, done: Promise<unknown>, graceMs = 10_000): void {
  void done.finally(() => {
    setTimeout(() => {
      process.stderr.write(`test process still alive ${graceMs} ms after its tests ended; open: ${JSON.stringify(process.getActiveResourcesInfo())}\n`)
      root.end() // the plan and the results, as tap would have written them
      setImmediate(() => process.exit())
    }, graceMs).unref()
  })
  // Registered after tap's own beforeExit listener (the file imported tap first), so the root test
  // has ended and its output is written when this runs.
  process.once('beforeExit', () => {
    const left = process.getActiveResourcesInfo().filter(resource => !OWN_STDIO.has(resource))
    if (left.length === 0) return // nothing that could keep the exit cleanup from finishing
    process.stderr.write(`test process ending with handles it did not close: ${JSON.stringify(left)}\n`)
    process.exit()
  })
}
