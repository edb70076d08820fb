// The two cache layouts compute the same thing: a graph that returns only the
// new positions (append), whose cache chatd keeps in buffers with spare slots,
// gives the logits of the same weights written with the whole cache returned
// (concat), step after step, across capacity growth and when rows of
// different lengths are gathered into one batch.
import t from 'tap'
import { DecoderSession } from '../../../../src/engine/onnx/device/decoder-session.ts'
import { CAPACITY_STEP, cacheLayoutFor, type CacheLayout, type CacheRoom, type RowCache } from '../../../../src/engine/onnx/cache/kv-cache.ts'
import { readModelDir } from '../../../../src/engine/onnx/model-dir.ts'
import { storiesModelDir } from '../../../helpers/models.ts'
import { testDevice } from '../../../helpers/webgpu.ts'

async function open (cache: 'append' | 'concat'): Promise<{ session: DecoderSession; layout: CacheLayout }> {
  const session = await DecoderSession.load(readModelDir(storiesModelDir('fp32', cache), 'fp32'), { device: testDevice(), threads: 1 })
  t.teardown(() => session.close())
  return { session, layout: cacheLayoutFor(session) }
}

function maxAbsDiff (a: Float32Array, b: Float32Array): number {
  let max = 0
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]))
  return max
}

const prompt = [1, 403, 407, 261, 347, 292]
/** A fixed token stream to feed after the prompt (not sampled, so both layouts see the same input). */
const stream = (n: number): number[] => Array.from({ length: n }, (_, k) => 260 + ((k * 37) % 200))

t.test('append and concat caches give the same logits for 150 steps, through capacity growth', async t => {
  const append = await open('append')
  const concat = await open('concat')
  t.equal(append.session.cacheOutputs, 'append')
  t.equal(concat.session.cacheOutputs, 'concat')
  let a = await append.layout.run(append.layout.empty(), [prompt], 1)
  let c = await concat.layout.run(concat.layout.empty(), [prompt], 1)
  let worst = maxAbsDiff(a.logits, c.logits)
  const steps = stream(150)
  for (const token of steps) {
    a = await append.layout.run(a.cache, [[token]], 1)
    c = await concat.layout.run(c.cache, [[token]], 1)
    worst = Math.max(worst, maxAbsDiff(a.logits, c.logits))
  }
  const total = prompt.length + steps.length
  t.ok(total > 2 * CAPACITY_STEP, `${total} positions: the append cache grew at least twice`)
  t.same(a.cache.lengths, [total])
  t.same(c.cache.lengths, [total])
  t.ok(worst < 1e-4, `max |append - concat| = ${worst.toExponential(2)}`)
  append.layout.free(a.cache)
  concat.layout.free(c.cache)
})

t.test('rows of different lengths gathered into one batch step as they would alone', async t => {
  for (const style of ['append', 'concat'] as const) {
    const { session, layout } = await open(style)
    const V = session.model.vocabSize
    // Three sequences with 6, 75 and 20 cached positions (75 spans a capacity step).
    const lengths = [0, 69, 14]
    const solo: RowCache[] = []
    for (const extra of lengths) solo.push((await layout.run(layout.empty(), [[...prompt, ...stream(extra)]], 1)).cache)
    const batch = layout.gather(solo.map(cache => ({ cache, row: 0 })))
    t.same(batch.lengths, lengths.map(n => prompt.length + n), `${style}: each row keeps its own length`)
    // Two steps together, against the same two steps alone.
    let together = await layout.run(batch, [[300], [301], [302]], 1)
    together = await layout.run(together.cache, [[400], [401], [402]], 1)
    for (let b = 0; b < 3; b++) {
      let alone = await layout.run(solo[b], [[300 + b]], 1)
      alone = await layout.run(alone.cache, [[400 + b]], 1)
      const diff = maxAbsDiff(together.logits.subarray(b * V, (b + 1) * V), alone.logits)
      t.ok(diff < 1e-4, `${style}: row ${b} matches its solo run (max diff ${diff.toExponential(2)})`)
      layout.free(alone.cache)
    }
    // Dropping the middle row keeps the others' caches intact.
    const kept = layout.gather([{ cache: together.cache, row: 0 }, { cache: together.cache, row: 2 }])
    layout.free(together.cache)
    t.same(kept.lengths, [prompt.length + 2, prompt.length + 16])
    const after = await layout.run(kept, [[500], [502]], 1)
    t.equal(after.logits.length, 2 * V)
    layout.free(after.cache)
  }
})

t.test('packed rows: one run feeds each row its own number of tokens, and each row computes what it would alone', async t => {
  const { session, layout } = await open('append')
  const V = session.model.vocabSize
  t.equal(layout.packsRows, true, 'chatd\'s append graphs take tokens_per_row')
  // A decode row (one token), a prompt chunk (seven) and a row starting from nothing (three).
  const pasts = [[...prompt, ...stream(40)], prompt, []]
  const feeds = [[300], stream(7), [1, 403, 407]]
  const solo: RowCache[] = []
  for (const past of pasts) solo.push(past.length > 0 ? (await layout.run(layout.empty(), [past], 1)).cache : layout.empty())
  const batch = layout.gather(solo.map(cache => ({ cache, row: 0 })))
  let together = await layout.run(batch, feeds, 1)
  t.same(together.cache.lengths, pasts.map((p, b) => p.length + feeds[b].length), 'each row keeps only its real tokens')
  t.equal(together.logits.length, 3 * V, 'one row of logits per row: its last real token\'s')
  // A second mixed run with the lengths the other way round, then compare with each row alone.
  const second = [stream(5), [301], [302, 303]]
  together = await layout.run(together.cache, second, 1)
  for (let b = 0; b < 3; b++) {
    let alone = await layout.run(solo[b], [feeds[b]], 1)
    alone = await layout.run(alone.cache, [second[b]], 1)
    const diff = maxAbsDiff(together.logits.subarray(b * V, (b + 1) * V), alone.logits)
    t.ok(diff < 1e-4, `row ${b} matches its solo run (max diff ${diff.toExponential(2)})`)
    layout.free(alone.cache)
  }
  layout.free(together.cache)
})

t.test('graphs without tokens_per_row: rows of different lengths share a first run left-padded, each as it would alone; on a past they are refused', async t => {
  const { session, layout } = await open('concat')
  const V = session.model.vocabSize
  t.equal(layout.packsRows, false)
  t.equal(layout.padsFirstRun, true, 'chatd\'s concat graphs take padded rows')
  const feeds = [[...prompt, ...stream(5)], [1, 403, 407], prompt]
  let together = await layout.run(layout.empty(3), feeds, 1)
  t.same(together.cache.lengths, feeds.map(f => f.length), 'each row holds its own tokens, not the padding')
  const next = [[300], [301], [302]]
  const first = together.logits.slice()
  together = await layout.run(together.cache, next, 1)
  for (let b = 0; b < 3; b++) {
    const alone = await layout.run(layout.empty(), [feeds[b]], 1)
    const step = await layout.run(alone.cache, [next[b]], 1)
    const diff = Math.max(maxAbsDiff(first.subarray(b * V, (b + 1) * V), alone.logits), maxAbsDiff(together.logits.subarray(b * V, (b + 1) * V), step.logits))
    t.ok(diff < 1e-4, `row ${b} matches its solo runs (max diff ${diff.toExponential(2)})`)
    layout.free(step.cache)
  }
  await t.rejects(layout.run(together.cache, [[1, 2], [3]], 1), /rows of one run take the same number of tokens here \(got 2, 1\)/)
  layout.free(together.cache)
  t.equal(layout.bytesHeld, 0)
  const { layout: append } = await open('append')
  t.equal(append.padsFirstRun, false, 'append graphs pack rows instead')
})

t.test('with room (a reservation), a cache that must grow doubles, up to the room, and computes the same', async t => {
  const { layout } = await open('append')
  const capacities = (room?: CacheRoom) => async (): Promise<{ seen: number[]; logits: Float32Array }> => {
    const seen: number[] = []
    let out = await layout.run(layout.empty(), [prompt], 1, true, room)
    seen.push((out.cache as RowCache & { capacity: number }).capacity)
    // A prompt fed in chunks, then a reply a token at a time: 6 + 5 * 40 + 100 positions.
    for (let k = 0; k < 5; k++) {
      out = await layout.run(out.cache, [stream(40).map(x => x + k)], 1, true, room)
      seen.push((out.cache as RowCache & { capacity: number }).capacity)
    }
    for (const token of stream(100)) {
      out = await layout.run(out.cache, [[token]], 1, false, room)
      seen.push((out.cache as RowCache & { capacity: number }).capacity)
    }
    layout.free(out.cache)
    return { seen: [...new Set(seen)], logits: out.logits }
  }
  const stepwise = await capacities()()
  const ahead = await capacities({ most: 400 })()
  // Told where the prompt ends (6 + 5 * 40 positions, and the first generated token): the append graph's attention spans
  // the whole capacity, so its cache still grows by doubling (a cache in GPU memory makes room for it at once: webgpu-exactness.test.ts).
  const promptKnown = await capacities({ most: 400, least: 207 })()
  // Without room: one CAPACITY_STEP more each time the positions pass the capacity (a copy of the whole cache each time).
  t.same(stepwise.seen, [64, 128, 192, 256, 320])
  // With room: twice the capacity each time, the last growth stopping at the room (rounded to a step).
  t.same(ahead.seen, [64, 128, 256, 448])
  t.ok(ahead.seen.at(-1)! >= 306 && ahead.seen.at(-1)! < 400 + CAPACITY_STEP, 'never past the room by more than a step')
  t.same(promptKnown.seen, ahead.seen, 'the prompt\'s end known: the same growth')
  // On the CPU bit for bit; on WebGPU the attention kernel sums a longer (masked) cache in another order.
  const tolerance = testDevice() === 'cpu' ? 0 : 1e-4
  t.ok(maxAbsDiff(stepwise.logits, ahead.logits) <= tolerance, `the same logits, whatever the capacity (within ${tolerance})`)
  t.ok(maxAbsDiff(stepwise.logits, promptKnown.logits) <= tolerance, `the same logits with the prompt's end known (within ${tolerance})`)
  // A cache never grows below what a run needs, whatever room it is given.
  const tight = await layout.run(layout.empty(), [stream(100)], 1, true, { most: 10, least: 50 })
  t.equal((tight.cache as RowCache & { capacity: number }).capacity, 128)
  layout.free(tight.cache)
})
