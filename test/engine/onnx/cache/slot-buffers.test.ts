// The host's cache buffers: rows copied and written where they belong, and freed buffers kept
// for reuse (a copy into memory never written costs a page fault every 4 KiB) within their limits,
// zeroed before reuse, never handed to two caches at once.
import tap from 'tap'
import { SlotBuffers, SPARE_MIN_BYTES, type Slots } from '../../../../src/engine/onnx/cache/slot-buffers.ts'

const names = ['past_key_values.0.key', 'past_key_values.0.value']
const heads = 2
const dim = 64
/** Bytes of one name's buffer for `rows` rows of `capacity` positions. */
const bufferBytes = (rows: number, capacity: number): number => rows * heads * capacity * dim * 4
// A capacity whose buffers are kept for reuse, and one whose are not.
const big = Math.ceil(SPARE_MIN_BYTES / bufferBytes(1, 1) / 64) * 64 * 2
const small = 64

/** Buffers whose spares have room for 64 of the `big` caches' buffers. */
const roomy = (type: 'float32' | 'float16'): SlotBuffers => new SlotBuffers(names, { heads, dim, type }, { most: 64 * bufferBytes(1, big), total: 64 * bufferBytes(1, big) })

/** One row of `length` positions, position p of head h holding 1000 h + p + 1 in every element. */
function filled (slots: SlotBuffers, length: number, capacity = big): Slots {
  const row = slots.allocate([0], capacity)
  const entries = new Float32Array(heads * length * dim)
  for (let h = 0; h < heads; h++) for (let p = 0; p < length; p++) entries.fill(1000 * h + p + 1, (h * length + p) * dim, (h * length + p + 1) * dim)
  slots.write(row, () => entries, [length], length)
  return row
}

function positionValue (slots: Slots, name: string, h: number, p: number): number {
  return slots.buffers[name][(h * slots.capacity + p) * dim]
}

tap.test('a freed buffer is reused for the next cache, zeroed past what is copied into it', async t => {
  const slots = roomy('float32')
  const source = filled(slots, big - 10)
  // A cache with data everywhere, freed: its buffers become spares.
  const old = slots.allocate([0], big)
  for (const name of names) old.buffers[name].fill(-7)
  const oldBuffers = names.map(name => old.buffers[name].buffer)
  slots.free(old)
  t.equal(slots.spareBytes, 2 * bufferBytes(1, big), 'both buffers kept')
  t.equal(slots.bytesHeld, bufferBytes(1, big) * 2, 'only the source is in use')

  // A prefix cache hit: all but 20 of the source's positions into a new cache of the same capacity.
  const copied = big - 20
  const taken = slots.gather([{ slots: source, row: 0, length: copied }])
  t.equal(taken.capacity, big)
  t.ok(names.every((name, i) => taken.buffers[name].buffer === oldBuffers[i]), 'the spares are the new cache\'s buffers')
  t.equal(slots.spareBytes, 0)
  for (const name of names) {
    t.equal(positionValue(taken, name, 1, copied - 1), 1000 + copied, `${name}: copied positions are the source's`)
    t.equal(positionValue(taken, name, 1, copied), 0, `${name}: the first position past the copy is zero`)
    t.notOk(taken.buffers[name].some(v => v === -7), `${name}: nothing of the old cache is left`)
    t.equal(taken.buffers[name].length, heads * taken.capacity * dim, 'the view is the new cache\'s size, whatever the buffer\'s')
  }
  // The decode step writes after the copy as into any cache.
  slots.write(taken, () => new Float32Array(heads * dim).fill(5), [1], 1)
  t.equal(positionValue(taken, names[0], 0, copied), 5)
  slots.free(taken)
  slots.free(source)
  t.equal(slots.bytesHeld, 0)
})

tap.test('a spare serves a cache of up to its size and at least half of it', async t => {
  const slots = roomy('float32')
  const a = slots.allocate([0], 4 * big)
  const buffer = a.buffers[names[0]].buffer
  slots.free(a)
  const tooSmallForIt = slots.allocate([0], big)
  t.ok(tooSmallForIt.buffers[names[0]].buffer !== buffer, 'a cache of a quarter of it takes new memory')
  const tooLarge = slots.allocate([0], 8 * big)
  t.ok(tooLarge.buffers[names[0]].buffer !== buffer, 'a larger cache takes new memory')
  const half = slots.allocate([0], 2 * big)
  t.ok(half.buffers[names[0]].buffer === buffer, 'a cache of half of it takes it')
  t.equal(slots.bytesHeld, 2 * (bufferBytes(1, big) + bufferBytes(1, 8 * big) + bufferBytes(1, 4 * big)), 'a reused buffer counts whole')
  for (const s of [tooSmallForIt, tooLarge, half]) slots.free(s)
  t.equal(slots.bytesHeld, 0)
})

tap.test('the spares stay within their limits', async t => {
  const one = bufferBytes(1, big)
  const limited = new SlotBuffers(names, { heads, dim, type: 'float32' }, { most: 3 * one, total: 100 * one })
  const caches = [0, 1, 2].map(() => limited.allocate([0], big))
  for (const c of caches) limited.free(c)
  t.equal(limited.spareBytes, 3 * one, '`most`: the oldest give way (3 of 6 buffers kept)')

  const within = new SlotBuffers(names, { heads, dim, type: 'float32' }, { most: 100 * one, total: 6 * one })
  const held = within.allocate([0], big)
  const freed = [0, 1].map(() => within.allocate([0], big))
  for (const c of freed) within.free(c)
  t.equal(within.bytesHeld + within.spareBytes, 6 * one, '`total`: the buffers in use and the spares together')
  // A larger cache than any spare: the spares give way to it rather than the process holding both.
  const larger = within.allocate([0], 4 * big)
  t.equal(within.spareBytes, 0, 'the spares are let go before new memory would pass the total')
  within.free(larger)
  t.equal(within.spareBytes, 4 * one, 'of the larger cache\'s two buffers, the one that fits the total beside the cache in use is kept')
  within.free(held)

  const none = new SlotBuffers(names, { heads, dim, type: 'float32' })
  none.free(none.allocate([0], big))
  t.equal(none.spareBytes, 0, 'no limits: nothing kept')

  const tiny = new SlotBuffers(names, { heads, dim, type: 'float32' }, { most: 100 * one, total: 100 * one })
  t.ok(bufferBytes(1, small) < SPARE_MIN_BYTES)
  tiny.free(tiny.allocate([0], small))
  t.equal(tiny.spareBytes, 0, 'small buffers are not kept')
})

tap.test('freeing twice frees once: no buffer serves two caches', async t => {
  const slots = roomy('float32')
  const cache = slots.allocate([0], big)
  const alias: Slots = { ...cache }
  slots.free(cache)
  slots.free(cache)
  slots.free(alias)
  t.equal(slots.spareBytes, 2 * bufferBytes(1, big), 'each buffer kept once')
  t.same(Object.keys(alias.buffers), [], 'a copy sharing the buffers loses them too')
  const a = slots.allocate([0], big)
  const b = slots.allocate([0], big)
  for (const name of names) t.ok(a.buffers[name].buffer !== b.buffers[name].buffer, `${name}: two caches, two buffers`)
  slots.free(a)
  slots.free(b)
  t.equal(slots.bytesHeld, 0)
})

tap.test('float16 caches reuse alike', async t => {
  const slots = roomy('float16')
  const a = slots.allocate([0], 2 * big)
  a.buffers[names[0]].fill(9)
  const buffer = a.buffers[names[0]].buffer
  slots.free(a)
  const b = slots.allocate([0], 2 * big)
  t.ok(b.buffers[names[0]] instanceof Uint16Array)
  t.ok(b.buffers[names[0]].buffer === buffer, 'the spare reused')
  t.notOk(b.buffers[names[0]].some(v => v !== 0), 'zeroed')
  slots.free(b)
})

tap.test('a gather makes room for `least` positions at once (a cached prefix taken for a prompt and its reply)', async t => {
  const slots = new SlotBuffers(names, { heads, dim, type: 'float32' })
  const source = filled(slots, 100, 128)
  const plain = slots.gather([{ slots: source, row: 0, length: 90 }])
  t.equal(plain.capacity, 128, 'the rows and one more position, rounded to 64')
  const roomy = slots.gather([{ slots: source, row: 0, length: 90 }], 1000)
  t.equal(roomy.capacity, 1024, 'room for 1,000, rounded to 64')
  t.same(roomy.lengths, [90])
  t.equal(positionValue(roomy, names[1], 1, 89), 1090, 'the rows copied')
  t.equal(positionValue(roomy, names[1], 1, 90), 0, 'nothing past them')
  t.equal(slots.gather([{ slots: source, row: 0, length: 100 }], 10).capacity, 128, 'a smaller least: as without it')
})
