// The benchmark's figures from rounds: medians with their range, outlying rounds named.
import t from 'tap'
import { formatSummary, median, perRoundRatio, summarize } from '../../scripts/bench/rounds.ts'

t.test('median, range and every round kept', async t => {
  t.equal(median([3, 1, 2]), 2)
  t.equal(median([4, 1, 3, 2]), 2.5)
  const s = summarize([10, 12, 11])
  t.same(s, { median: 11, min: 10, max: 12, rounds: [10, 12, 11], outliers: [] })
  t.equal(formatSummary(s), '11 (10-12)')
})

t.test('a round more than twice (or under half) the others\' median is reported, not dropped', async t => {
  const s = summarize([10, 25, 11, 4.9])
  t.same(s.rounds, [10, 25, 11, 4.9], 'kept')
  t.same(s.outliers, [2, 4])
  t.equal(s.median, 10.5, 'the median still counts every round')
  t.match(formatSummary(s), /\[outlier rounds 2, 4\]$/)
})

t.test('missing values and ratios per round', async t => {
  t.same(summarize([null, 2, undefined]).rounds, [null, 2, null])
  t.equal(summarize([]).median, null)
  t.equal(formatSummary(summarize([null])), 'n/a')
  t.same(perRoundRatio([2, 3, null], [1, 0, 2]), [2, null, null])
})
