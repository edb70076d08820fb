// A test file whose process lingers after its tests are done holds tap until its per-file
// timeout kills it, and the file fails though every assertion passed. postgres-outage.test.ts
// and grammar-isolation.test.ts each did so in some whole-suite runs, never when run alone;
// what kept them alive is not known yet. This names what is still open on stderr, for whoever finds the leak,
// then ends the file's TAP output and the process.
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
