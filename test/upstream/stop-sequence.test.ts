// Which stop string ended an upstream's reply: vLLM says so in the choice's `stop_reason`
// (a number there is a stop token, not a string). The Messages API reports it as
// `stop_sequence`; only a string the request itself asked to stop at is taken.

import t, { type Test } from 'tap'
import type { GenerateEvent, GenerateRequest } from '../../src/engine/backend.ts'
import { UpstreamBackend } from '../../src/engine/upstream/backend.ts'
import { chunk, loopbackServer, sseData, sseHead } from './loopback.ts'

const never = new AbortController().signal
const request: GenerateRequest = { messages: [{ role: 'user', content: 'Count' }], temperature: 0, topP: 1, topK: 0, stop: ['END', 'STOP'] }

async function finishOf (t: Test, stopReason: unknown): Promise<Extract<GenerateEvent, { type: 'finish' }>> {
  const upstream = await loopbackServer(t, (_req, res) => {
    sseHead(res)
    sseData(res, chunk({ role: 'assistant', content: 'one two' }))
    sseData(res, { ...chunk({}, 'stop'), choices: [{ index: 0, delta: {}, finish_reason: 'stop', stop_reason: stopReason }] })
    sseData(res, '[DONE]')
    res.end()
  })
  const backend = new UpstreamBackend({ id: 'relay', baseUrl: `${upstream.url}/v1`, upstreamModel: 'm' })
  t.teardown(() => backend.close())
  let finish: Extract<GenerateEvent, { type: 'finish' }> | undefined
  for await (const event of backend.generate(request, never)) if (event.type === 'finish') finish = event
  return finish!
}

t.test('a stop string the request asked for is reported; anything else is not', async t => {
  t.equal((await finishOf(t, 'STOP')).stopSequence, 'STOP')
  t.equal((await finishOf(t, 151643)).stopSequence, undefined, 'a stop token id')
  t.equal((await finishOf(t, 'not asked for')).stopSequence, undefined, 'a string the request did not send')
  t.equal((await finishOf(t, null)).stopSequence, undefined, 'an upstream that does not say')
})
