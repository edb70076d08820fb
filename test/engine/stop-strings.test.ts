import t from 'tap'
import { StopStringMatcher } from '../../src/engine/stop-strings.ts'

/** Feeds the chunks; returns everything emitted (with flush when not stopped) and whether it stopped. */
function run (stops: string[], chunks: string[]) {
  const m = new StopStringMatcher(stops)
  let out = ''
  let stopped = false
  for (const chunk of chunks) {
    const r = m.push(chunk)
    out += r.emit
    if (r.stopped) {
      stopped = true
      break
    }
  }
  if (!stopped) out += m.flush()
  return { out, stopped, matched: m.matchedStop }
}

/** Every way to cut `text` into two or three chunks (at every pair of positions). */
function splits (text: string): string[][] {
  const result: string[][] = [[text]]
  for (let i = 0; i <= text.length; i++) {
    for (let j = i; j <= text.length; j++) result.push([text.slice(0, i), text.slice(i, j), text.slice(j)])
  }
  return result
}

t.test('a stop string split at every position is never emitted', async (t) => {
  const cases: { stops: string[]; text: string; want: string; stopped: boolean }[] = [
    { stops: ['STOP'], text: 'hello STOP world', want: 'hello ', stopped: true },
    { stops: ['\n\n'], text: 'line one\nline two\n\nnext', want: 'line one\nline two', stopped: true },
    { stops: ['</answer>', 'User:'], text: 'The answer is 4.User: more</answer>', want: 'The answer is 4.', stopped: true },
    { stops: ['abc', 'bcd'], text: 'xxabcd', want: 'xx', stopped: true },
    { stops: ['abc', 'bd'], text: 'xabd', want: 'xa', stopped: true },
    { stops: ['aab'], text: 'aaaab', want: 'aa', stopped: true },
    { stops: ['STOP'], text: 'no stop here, STO', want: 'no stop here, STO', stopped: false },
    { stops: ['日本'], text: '日日本語', want: '日', stopped: true },
    { stops: ['👍🏽'], text: 'ok 👍 then 👍🏽', want: 'ok 👍 then ', stopped: true },
    { stops: ['x'], text: 'x', want: '', stopped: true },
  ]
  for (const c of cases) {
    let failures = 0
    for (const chunks of splits(c.text)) {
      const r = run(c.stops, chunks)
      if (r.out !== c.want || r.stopped !== c.stopped) {
        failures++
        t.same({ out: r.out, stopped: r.stopped }, { out: c.want, stopped: c.stopped }, `${JSON.stringify(c.stops)} over ${JSON.stringify(chunks)}`)
      }
    }
    t.equal(failures, 0, `${JSON.stringify(c.text)} with ${JSON.stringify(c.stops)}: all splits`)
  }
})

t.test('emits as early as possible and holds only possible stop prefixes', async (t) => {
  const m = new StopStringMatcher(['END'])
  t.same(m.push('hello E'), { emit: 'hello ', stopped: false }, 'holds "E"')
  t.same(m.push('N'), { emit: '', stopped: false }, 'holds "EN"')
  t.same(m.push('ough'), { emit: 'ENough', stopped: false }, 'releases once it cannot match')
  t.same(m.push(' E'), { emit: ' ', stopped: false })
  t.same(m.push('ND!'), { emit: '', stopped: true })
  t.equal(m.matchedStop, 'END')
  t.equal(m.stopped, true)
  t.same(m.push('more'), { emit: '', stopped: true }, 'nothing after a stop')
  t.equal(m.flush(), '')
})

t.test('the stop string completed first wins, however the text is cut', async (t) => {
  const r = run(['world', 'lo w'], ['hel', 'lo wor', 'ld'])
  t.equal(r.out, 'hel')
  t.equal(r.matched, 'lo w')
  // "a" is complete before "\na\n" could be: generation would already have ended there.
  for (const chunks of splits('\na\nb')) {
    const r2 = run(['\na\n', 'a'], chunks)
    t.same([r2.out, r2.matched], ['\n', 'a'], JSON.stringify(chunks))
  }
  // Same end: the longer (earlier-starting) stop string cuts more.
  t.equal(run(['b', 'ab'], ['xab']).out, 'x')
})

t.test('no stops, empty stops, empty pushes', async (t) => {
  const none = new StopStringMatcher([])
  t.same(none.push('anything'), { emit: 'anything', stopped: false })
  const empty = new StopStringMatcher([''])
  t.same(empty.push('abc'), { emit: 'abc', stopped: false }, 'an empty stop string is ignored')
  const m = new StopStringMatcher(['ab'])
  t.same(m.push(''), { emit: '', stopped: false })
  t.same(m.push('a'), { emit: '', stopped: false })
  t.equal(m.flush(), 'a', 'flush releases the held text')
})

t.test('random texts and chunkings agree with a plain indexOf', async (t) => {
  // Deterministic LCG: enough to vary the inputs.
  let state = 42
  const rand = (n: number) => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0
    return state % n
  }
  const letters = 'ab\n'
  let failures = 0
  for (let run_ = 0; run_ < 2000; run_++) {
    const word = (len: number) => Array.from({ length: len }, () => letters[rand(letters.length)]).join('')
    const stops = Array.from({ length: 1 + rand(3) }, () => word(1 + rand(4)))
    const text = word(rand(20))
    // Reference: read the text one character at a time and stop at the first position where some
    // stop string ends; the cut is where that stop string starts (the longest one on a tie).
    let earliest = -1
    for (let end = 1; end <= text.length && earliest < 0; end++) {
      for (const s of stops) {
        if (text.slice(0, end).endsWith(s) && (earliest < 0 || end - s.length < earliest)) earliest = end - s.length
      }
    }
    const chunks: string[] = []
    for (let i = 0; i < text.length;) {
      const n = 1 + rand(4)
      chunks.push(text.slice(i, i + n))
      i += n
    }
    const r = run(stops, chunks)
    const want = earliest >= 0 ? text.slice(0, earliest) : text
    if (r.out !== want || r.stopped !== (earliest >= 0)) {
      failures++
      if (failures < 5) t.same({ out: r.out, stopped: r.stopped }, { out: want, stopped: earliest >= 0 }, JSON.stringify({ stops, chunks }))
    }
  }
  t.equal(failures, 0)
})

t.test('hostile stop strings as long as a body allows: the text is read once, not again per token', async (t) => {
  // A client chooses its stop strings, and logit_bias can make the model repeat one token. With
  // these two, a matcher that looked again at the held text for each prefix length would compare
  // ~50,000 characters for each of ~50,000 lengths on every token once 100,000 are held: hours on
  // the engine's thread for this one request. Read once, it is a fraction of a second.
  const long = 'a'.repeat(100_000) + 'c'
  const ridge = 'a'.repeat(50_000) + 'b'.repeat(50_000)
  const m = new StopStringMatcher([ridge, long]) // the ridge first: a rescanning matcher cannot skip its lengths
  let out = ''
  for (let i = 0; i < 4000; i++) out += m.push('a'.repeat(32)).emit
  t.equal(m.heldLength, 100_000, 'holds exactly the longest prefix a stop string could still grow from')
  t.equal(out.length, 128_000 - 100_000, 'and has sent the rest as it came')
  const end = m.push('c')
  t.same({ stopped: end.stopped, emitted: end.emit.length }, { stopped: true, emitted: 0 })
  t.equal(m.matchedStop, long)
})
