// GroupCommit: items added in one event-loop turn are written by one
// writeMany; each caller learns its own item's fate; a row-specific failure
// fails only its row, an outage fails them all without retrying each.

import t from 'tap'
import { GroupCommit } from '../../src/accounts/group-commit.ts'

function recorder (opts: { failMany?: Error; badItem?: number; outage?: Error } = {}) {
  const calls: Array<{ many: boolean; items: number[] }> = []
  const commit = new GroupCommit<number>({
    writeMany: async items => {
      calls.push({ many: true, items })
      if (opts.outage) throw opts.outage
      if (opts.badItem !== undefined && items.includes(opts.badItem)) throw new Error('constraint failed')
    },
    writeOne: async item => {
      calls.push({ many: false, items: [item] })
      if (opts.outage) throw opts.outage
      if (item === opts.badItem) throw new Error('constraint failed')
    },
    sharedFailure: err => err === opts.outage,
    maxBatch: 3,
  })
  return { commit, calls }
}

t.test('items of one turn share a write; more than maxBatch are split; a lone item is written alone', async t => {
  const { commit, calls } = recorder()
  await Promise.all([1, 2, 3, 4].map(i => commit.add(i)))
  t.same(calls, [{ many: true, items: [1, 2, 3] }, { many: false, items: [4] }])
  await commit.add(5)
  t.same(calls.at(-1), { many: false, items: [5] })
})

t.test('a caller resolves only after its item was written', async t => {
  let release!: () => void
  const gate = new Promise<void>(resolve => { release = resolve })
  const commit = new GroupCommit<number>({ writeMany: () => gate, writeOne: () => gate, sharedFailure: () => false })
  let done = false
  const added = Promise.all([commit.add(1), commit.add(2)]).then(() => { done = true })
  await new Promise(resolve => setTimeout(resolve, 20))
  t.notOk(done, 'not before the write')
  release()
  await added
  t.ok(done)
})

t.test('a bad row fails alone; the others are written', async t => {
  const { commit, calls } = recorder({ badItem: 2 })
  const results = await Promise.allSettled([1, 2, 3].map(i => commit.add(i)))
  t.same(results.map(r => r.status), ['fulfilled', 'rejected', 'fulfilled'])
  t.match((results[1] as PromiseRejectedResult).reason, { message: 'constraint failed' })
  t.same(calls.filter(c => !c.many).map(c => c.items[0]).sort(), [1, 2, 3], 'each retried on its own')
})

t.test('an outage fails every row of the batch at once, without a retry per row', async t => {
  const outage = new Error('database down')
  const { commit, calls } = recorder({ outage })
  const results = await Promise.allSettled([1, 2, 3].map(i => commit.add(i)))
  t.same(results.map(r => r.status), ['rejected', 'rejected', 'rejected'])
  for (const r of results) t.equal((r as PromiseRejectedResult).reason, outage)
  t.equal(calls.length, 1, 'one write tried')
})
