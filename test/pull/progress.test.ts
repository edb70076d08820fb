// What a first start (and `chatd pull` without a terminal) says while it
// converts a checkpoint: the tensors done and the time left at this machine's
// pace, measured as it goes. A clock the test moves stands in for time.

import t from 'tap'
import { conversionSecondsLeft, lineReporter, PullTracker } from '../../src/pull/progress.ts'

t.test('the time left is the pace so far times the tensors left', async t => {
  t.equal(conversionSecondsLeft(0, 100, 5), undefined, 'no tensor done yet: no estimate')
  t.equal(conversionSecondsLeft(25, 100, 10), 30)
  t.equal(conversionSecondsLeft(100, 100, 40), 0)
  t.equal(conversionSecondsLeft(3, 0, 1), undefined)
})

t.test('the conversion lines and /readyz\'s status give the tensors and the time left', async t => {
  let clock = 0
  const lines: string[] = []
  const report = lineReporter(line => lines.push(line), 5000, () => clock)
  report({ type: 'convert-start', weights: 'int4' })
  clock = 10_000
  report({ type: 'convert-progress', tensors: 50, total: 200 })
  clock = 11_000
  report({ type: 'convert-progress', tensors: 55, total: 200 })
  clock = 80_000
  report({ type: 'convert-progress', tensors: 200, total: 200 })
  t.same(lines, [
    'converting the checkpoint to int4 with chatd\'s converter (several minutes for a 1.5B model; the time left is estimated as it goes)',
    'converting: 50 of 200 tensors, about 00:30 left at this machine\'s pace',
    'converting: 200 of 200 tensors',
  ], 'a line at most every 5 s, and the last')

  let now = 0
  const tracker = new PullTracker({ now: () => now })
  tracker.onEvent({ type: 'convert-start', weights: 'int4' })
  now = 60_000
  tracker.onEvent({ type: 'convert-progress', tensors: 100, total: 400 })
  t.equal(tracker.describe(), 'converting the checkpoint: 25% of 400 tensors, about 03:00 left at this machine\'s pace')
})
