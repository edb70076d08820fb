// presence_penalty, frequency_penalty, logit_bias and min_p change what stories260k generates,
// checked against references computed from an unadjusted greedy run's own log-probabilities;
// hostile values get 400 naming the field.
import t from 'tap'
import { loadTokenizer } from '../../src/engine/onnx/text/tokenizer.ts'
import { storiesModelDir } from '../helpers/models.ts'
import { startStoriesServer } from '../helpers/stories-server.ts'

const MODEL = 'stories260k'
const KEY = `sk-chatd-${'samplCtl'.repeat(4)}`
const server = await startStoriesServer(t, { modelId: MODEL, key: KEY })
const tokenizer = await loadTokenizer(storiesModelDir())

interface Entry { token: string; logprob: number; top_logprobs: Array<{ token: string; logprob: number }> }

async function ask (extra: Record<string, unknown>) {
  const res = await server.app.inject({
    method: 'POST',
    url: '/api/v1/chat/completions',
    headers: { authorization: `Bearer ${KEY}` },
    payload: { model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 40, temperature: 0, logprobs: true, top_logprobs: 20, ...extra },
  })
  return res
}
const tokensOf = async (extra: Record<string, unknown>) => ((await ask(extra)).json().choices[0].logprobs.content as Entry[])

/** A token's id from its text as logprobs show it (the vocabulary's piece with ▁ as a space). */
function idOf (text: string): number {
  for (let id = 0; id < tokenizer.vocabSize; id++) if (tokenizer.idToToken(id)?.replaceAll('▁', ' ') === text) return id
  throw new Error(`no token ${JSON.stringify(text)}`)
}

t.test('logit_bias -100 on the greedy token: the next most likely token is chosen instead', async t => {
  const plain = await tokensOf({})
  const first = plain[0]
  const biased = await tokensOf({ logit_bias: { [idOf(first.token)]: -100 } })
  t.not(biased[0].token, first.token)
  t.equal(biased[0].token, first.top_logprobs[1].token, 'the runner-up of the unbiased step')
  t.notOk(biased.some(e => e.token === first.token), 'never chosen anywhere')
})

t.test('logit_bias +100 forces a token at every step', async t => {
  const id = idOf(' the')
  const forced = await tokensOf({ logit_bias: { [id]: 100 }, max_tokens: 8 })
  t.same(forced.map(e => e.token), Array(8).fill(' the'))
})

t.test('frequency_penalty: each greedy step takes the best token after subtracting 2 per earlier use', async t => {
  const plain = await tokensOf({})
  const penalized = await tokensOf({ frequency_penalty: 2 })
  const k = penalized.findIndex((e, i) => e.token !== plain[i]?.token)
  t.ok(k > 0, `the penalty changes the reply (first at token ${k})`)
  // Up to k both runs generated the same tokens, so the unadjusted step k's alternatives give the reference.
  const counts = new Map<string, number>()
  for (const e of plain.slice(0, k)) counts.set(e.token, (counts.get(e.token) ?? 0) + 1)
  const score = (alt: { token: string; logprob: number }) => alt.logprob - 2 * (counts.get(alt.token) ?? 0)
  const best = plain[k].top_logprobs.reduce((a, b) => score(b) > score(a) ? b : a)
  t.equal(penalized[k].token, best.token, 'the reference choice at the first step where they differ')
  const repeats = (list: Entry[]) => list.length - new Set(list.map(e => e.token)).size
  t.ok(repeats(penalized) < repeats(plain), 'fewer repeated tokens')
})

t.test('presence_penalty: the same check with a flat 2 per token already used', async t => {
  const plain = await tokensOf({})
  const penalized = await tokensOf({ presence_penalty: 2 })
  const k = penalized.findIndex((e, i) => e.token !== plain[i]?.token)
  t.ok(k > 0)
  const used = new Set(plain.slice(0, k).map(e => e.token))
  const score = (alt: { token: string; logprob: number }) => alt.logprob - (used.has(alt.token) ? 2 : 0)
  t.equal(penalized[k].token, plain[k].top_logprobs.reduce((a, b) => score(b) > score(a) ? b : a).token)
})

t.test('min_p 1 leaves only the most likely token: sampling at any temperature is greedy', async t => {
  const greedy = (await ask({ logprobs: false, top_logprobs: null })).json().choices[0].message.content
  const sampled = (await ask({ logprobs: false, top_logprobs: null, temperature: 2, seed: 3 })).json().choices[0].message.content
  const withMinP = (await ask({ logprobs: false, top_logprobs: null, temperature: 2, seed: 3, min_p: 1 })).json().choices[0].message.content
  t.not(sampled, greedy, 'without min_p the sample differs')
  t.equal(withMinP, greedy)
})

t.test('hostile values get 400 naming the field', async t => {
  const cases: Array<[Record<string, unknown>, string, RegExp?]> = [
    [{ logit_bias: { [tokenizer.vocabSize]: 5 } }, 'logit_bias', /vocabulary/],
    [{ logit_bias: { 999999999: 5 } }, 'logit_bias'],
    [{ logit_bias: { '-1': 5 } }, 'logit_bias'],
    [{ logit_bias: { abc: 5 } }, 'logit_bias'],
    [{ logit_bias: { '01': 5 } }, 'logit_bias'],
    [{ logit_bias: { 5: 101 } }, 'logit_bias[5]'],
    [{ logit_bias: { 5: 'x' } }, 'logit_bias[5]'],
    [{ logit_bias: Object.fromEntries(Array.from({ length: 301 }, (_, i) => [i, 1])) }, 'logit_bias'],
    [{ min_p: 1.5 }, 'min_p'],
    [{ min_p: -0.1 }, 'min_p'],
    [{ frequency_penalty: 2.5 }, 'frequency_penalty'],
    [{ presence_penalty: -3 }, 'presence_penalty'],
  ]
  for (const [patch, param, message] of cases) {
    const res = await ask({ ...patch, stream: false })
    t.equal(res.statusCode, 400, `${JSON.stringify(patch).slice(0, 60)}: 400`)
    t.match(res.json().error, { code: 'invalid_parameter', param }, `${JSON.stringify(patch).slice(0, 60)}: names ${param}`)
    if (message) t.match(res.json().error.message, message)
  }
})
