// The retention job (store/retention-job.ts) that stored responses and usage records share:
// batches until a short one, the run's time budget, and other work let in between batches,
// which matters on SQLite, whose statements run on the thread that serves every request.
// Its timer, failures and stop() are tested through stored responses (test/responses/).
import t from 'tap'
import { RetentionJob } from '../../src/store/retention-job.ts'

t.test('batches go on until one is short, and stop at the run\'s budget', async t => {
  const cutoffs: Date[] = []
  let left = 25
  const job = new RetentionJob('rows', async (cutoff, batch) => {
    cutoffs.push(cutoff)
    const n = Math.min(batch, left)
    left -= n
    return n
  }, { retentionDays: 2, batch: 10, now: () => new Date('2026-03-03T00:00:00Z') })
  t.equal(await job.runOnce(), 25)
  t.equal(cutoffs.length, 3, '10, 10, then 5: short, so the run ends')
  t.same(cutoffs[0], new Date('2026-03-01T00:00:00Z'), 'older than two days')

  let calls = 0
  const endless = new RetentionJob('rows', async (_cutoff, batch) => { calls++; await new Promise(resolve => setTimeout(resolve, 5)); return batch }, { retentionDays: 1, batch: 10, runBudgetMs: 50 })
  const deleted = await endless.runOnce()
  t.ok(calls >= 2 && calls < 40, `a run ends once its budget is spent (${calls} batches in 50 ms)`)
  t.equal(deleted, calls * 10)
})

t.test('a run lets other work in between its batches, even when each answers at once (SQLite)', async t => {
  let batches = 0
  const job = new RetentionJob('rows', async (_cutoff, batch) => (++batches <= 50 ? batch : 0), { retentionDays: 1, batch: 10 })
  let otherTurns = 0
  let running = true
  const other = (): void => {
    otherTurns++
    if (running) setImmediate(other)
  }
  setImmediate(other)
  t.equal(await job.runOnce(), 500)
  running = false
  t.ok(otherTurns >= 40, `other work ran ${otherTurns} times during the run's 51 batches`)
})
