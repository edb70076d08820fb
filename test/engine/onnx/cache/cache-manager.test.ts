// The cache manager's rules on their own, over a layout that only counts
// positions: scopes never see each other's entries, the shared prefix is
// reused up to its end, and room is made fairly (own entries first, then the
// scope holding the most while it is over its share, any scope only when
// asked), freeing nothing when the rules cannot make room.
import t from 'tap'
import { CacheManager } from '../../../../src/engine/onnx/cache/cache-manager.ts'
import { KvBudget, SLOT_SLACK } from '../../../../src/engine/onnx/cache/kv-budget.ts'
import type { CacheLayout, RowCache } from '../../../../src/engine/onnx/cache/kv-cache.ts'

/** Row caches that are only their lengths; `held` counts the ones not yet freed. */
function countingLayout () {
  const live = new Set<RowCache>()
  const make = (length: number): RowCache => {
    const cache = { lengths: [length] }
    live.add(cache)
    return cache
  }
  const layout = {
    empty: () => make(0),
    gather: (rows: Array<{ cache: RowCache; row: number; length?: number }>) => make(rows[0].length ?? rows[0].cache.lengths[rows[0].row]),
    free: (cache: RowCache) => { live.delete(cache) },
  } as unknown as CacheLayout
  /** What a finished sequence does: its row's first positions kept for `scope`, its own cache freed. */
  const remember = (cache: CacheManager, scope: string, tokens: number[]): void => {
    const row = make(tokens.length)
    cache.remember(scope, tokens, row, 0, [])
    layout.free(row)
  }
  return { layout, remember, held: () => live.size }
}

const ids = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i)

t.test('a scope finds only its own entries', async t => {
  const { layout, remember } = countingLayout()
  const cache = new CacheManager(layout, new KvBudget(10_000, 1))
  const prompt = ids(1, 40)
  remember(cache, 'A', prompt)
  t.equal(cache.lookup('A', prompt, 39)?.length, 39)
  t.equal(cache.lookup('B', prompt, 39), null, 'another scope: nothing')
  t.equal(cache.lookup('', prompt, 39), null, 'no scope: nothing')
  remember(cache, 'B', prompt)
  t.equal(cache.size, 2, 'the same tokens, kept once per scope')
  t.equal(cache.sizeOf('A'), 1)
})

t.test('tokens a scope keeps already are not copied again; a longer or another scope\'s are', async t => {
  const { layout, remember, held } = countingLayout()
  let copies = 0
  const gather = layout.gather.bind(layout)
  layout.gather = rows => { copies++; return gather(rows) }
  const cache = new CacheManager(layout, new KvBudget(10_000, 1))
  const prompt = ids(1, 40)
  remember(cache, 'A', prompt)
  remember(cache, 'A', prompt)
  remember(cache, 'A', prompt.slice(0, 30))
  t.equal(copies, 1, 'the same prompt and a prefix of it: one copy')
  t.equal(cache.size, 1)
  t.equal(held(), 1, 'nothing left unfreed')
  remember(cache, 'B', prompt)
  t.equal(copies, 2, 'another scope keeps its own')
  remember(cache, 'A', ids(1, 41))
  t.equal(copies, 3, 'a longer one is copied')
  t.equal(cache.sizeOf('A'), 1, 'and serves the shorter')
  t.equal(cache.lookup('A', prompt, 40)?.entry.tokens.length, 41)
})

t.test('the shared prefix: any scope reuses it up to its end; its own entries beyond', async t => {
  const { layout, remember } = countingLayout()
  const shared = ids(1, 20)
  const cache = new CacheManager(layout, new KvBudget(10_000, 1), { sharedIds: shared })
  const prompt = [...shared, ...ids(100, 30)]
  remember(cache, 'A', prompt)
  t.equal(cache.size, 2, 'A\'s entry and the shared prefix\'s')
  t.equal(cache.lookup('B', prompt, 49)?.length, 20, 'B: the shared prefix, nothing of A\'s')
  t.equal(cache.lookup('A', prompt, 49)?.length, 49, 'A: its own whole prompt')
  const off = [...ids(1, 19), 999, ...ids(100, 30)]
  t.equal(cache.lookup('B', off, 49), null, 'a prompt that differs inside the shared prefix: nothing')
})

t.test('fair share: own entries first, then the scope over its share, never one within it', async t => {
  const { layout, remember, held } = countingLayout()
  // Budget 1000: B keeps 200 (within half), A keeps two of 100.
  const cache = new CacheManager(layout, new KvBudget(1000, 1))
  remember(cache, 'B', ids(1, 200 - SLOT_SLACK))
  remember(cache, 'A', ids(1000, 100 - SLOT_SLACK))
  remember(cache, 'A', ids(2000, 100 - SLOT_SLACK))
  t.equal(cache.keptPositions, 400)
  // A's request of 350 beside its own running one of 200 (rows padded: 700): one of A's entries goes, B's stays.
  t.ok(cache.makeRoom('A', [{ scope: 'A', positions: 200 }, { scope: 'A', positions: 350 }]), 'room made')
  t.equal(cache.sizeOf('A'), 1, 'one of A\'s entries gave way: 2 x 350 + 300 kept fits')
  t.equal(cache.sizeOf('B'), 1)
  // More than the budget beside B's entry: refused, and nothing is freed for nothing.
  t.notOk(cache.makeRoom('A', [{ scope: 'A', positions: 300 }, { scope: 'A', positions: 300 }, { scope: 'A', positions: 200 }]), 'no room within the rules')
  t.equal(cache.sizeOf('A'), 1, 'A\'s entry was not freed in vain')
  t.equal(cache.sizeOf('B'), 1, 'B holds 200 of 1000, within its share: kept')
  // With nothing else running, any entry may go.
  t.ok(cache.makeRoom('A', [{ scope: 'A', positions: 900 }], { anyScope: true }))
  t.equal(cache.size, 0)
  t.equal(held(), 0, 'every freed entry\'s cache was released')
})

t.test('fair share: a scope over its share gives way to one within it, down to its share', async t => {
  const { layout, remember } = countingLayout()
  const cache = new CacheManager(layout, new KvBudget(1000, 1))
  for (let i = 0; i < 6; i++) remember(cache, 'A', ids(1000 * (i + 1), 100 - SLOT_SLACK))
  t.equal(cache.keptPositions, 600)
  // B asks for 600: A holds 600 of 1000 with two scopes (share 500), so A's entries give way while it is over.
  t.ok(cache.makeRoom('B', [{ scope: 'B', positions: 400 }]))
  t.equal(cache.sizeOf('A'), 6, 'nothing was needed yet')
  t.ok(cache.makeRoom('B', [{ scope: 'B', positions: 500 }]))
  t.equal(cache.sizeOf('A'), 5, 'A gave one entry, the least recently used')
  t.equal(cache.lookup('A', ids(1000, 100 - SLOT_SLACK), 100)?.length ?? 0, 0, 'the oldest went')
  t.notOk(cache.makeRoom('B', [{ scope: 'B', positions: 700 }]), 'A at its share keeps the rest while others run')
  t.equal(cache.sizeOf('A'), 5)
})

t.test('the entry a newcomer is about to take goes last, and only when asked', async t => {
  const { layout, remember } = countingLayout()
  const cache = new CacheManager(layout, new KvBudget(300, 1))
  const prompt = ids(1, 100)
  remember(cache, 'A', prompt)
  const match = cache.lookup('A', prompt, 99)
  t.ok(match)
  t.notOk(cache.makeRoom('A', [{ scope: 'A', positions: 200 }], { keep: match?.entry }), 'kept: no room')
  t.ok(match && cache.holds(match.entry))
  t.ok(cache.makeRoom('A', [{ scope: 'A', positions: 200 }], { keep: match?.entry, orKeep: true }))
  t.notOk(match && cache.holds(match.entry), 'given up last')
})

t.test('the kept bound (PREFIX_CACHE_MB): prompts that never repeat keep at most it; the scope keeping the most loses its own first', async t => {
  const { layout, remember, held } = countingLayout()
  // 2 bytes a position: a kept bound of 1,000 bytes is 500 positions, within a budget of 10,000.
  const cache = new CacheManager(layout, new KvBudget(20_000, 2), { keptBytes: 1000 })
  t.equal(cache.keptLimit, 500)
  remember(cache, 'B', ids(1, 100 - SLOT_SLACK))
  // A floods with prompts it never sends again: 50 of them, each 100 positions kept.
  for (let i = 0; i < 50; i++) remember(cache, 'A', ids(1000 * (i + 1), 100 - SLOT_SLACK))
  t.equal(cache.keptPositions, 500, 'held at the bound, not at the budget')
  t.equal(held(), cache.size, 'evicted entries released their caches')
  t.equal(cache.sizeOf('B'), 1, 'B keeps its entry: A keeps the most, so A\'s go')
  t.equal(cache.sizeOf('A'), 4)
  t.equal(cache.lookup('A', ids(50_000, 100 - SLOT_SLACK), 100)?.length, 100 - SLOT_SLACK, 'A\'s newest is kept')
  t.equal(cache.lookup('A', ids(1000, 100 - SLOT_SLACK), 100), null, 'A\'s oldest went')
  // An entry larger than the bound alone is not kept at all.
  remember(cache, 'C', ids(90_000, 600))
  t.equal(cache.sizeOf('C'), 0)
  t.ok(cache.keptPositions <= 500)
  // Without a kept bound the whole budget may be kept, as before.
  t.equal(new CacheManager(layout, new KvBudget(20_000, 2)).keptLimit, 10_000)
})
