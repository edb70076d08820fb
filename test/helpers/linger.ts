// A test file whose process lingers after its tests are done holds tap until its per-file
// timeout kills it, and the file fails though every assertion passed. grammar-isolation.test.ts
// did so once in a whole-suite run, never when run alone; what kept it alive is not known. This
// names what is still open on stderr, for whoever finds it, then ends the file's TAP output and
// the process. (postgres-outage.test.ts did the same, from another cause, now found: a process
// that cannot close a socket spins in its exit cleanup, where no JavaScript runs and this guard
// cannot help; see reset() in fault-proxy.ts.)
//
// It is armed when the file's tests have finished, not from a teardown of the root test: tap
// ends the root test only once the event loop is empty, which is exactly what a leak prevents
// (the first version of this guard, hooked there, never fired).

import type { TAP } from 'tap'

/** Once `done` (the file's last subtest) settles: if the process is still alive `graceMs` later, log its open resources and end. */
export function exitIfLingering (root: TAP, done: Promise<unknown>, graceMs = 10_000): void {
  void done.finally(() => {
    setTimeout(() => {
      process.stderr.write(`test process still alive ${graceMs} ms after its tests ended; open: ${JSON.stringify(process.getActiveResourcesInfo())}\n`)
      root.end() // the plan and the results, as tap would have written them
      setImmediate(() => process.exit())
    }, graceMs).unref()
  })
}
