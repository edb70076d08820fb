// The engine's side of the grammar worker, against ports this test answers:
// a sequence's first step, still unanswered when its worker is replaced (one
// retired while idle may not have read it), goes to the new worker, and the
// sequence carries on there; a later step's worker held the matcher, so that
// step fails; accepted tokens travel with the next step, asked for at once;
// each scope's steps go to its own worker's port, so a busy worker holds up
// only its own scope.
import { MessageChannel, type MessagePort } from 'node:worker_threads'
import t from 'tap'
import { GrammarClient } from '../../../../src/engine/onnx/grammar/grammar-client.ts'
import type { ToMatcher } from '../../../../src/engine/onnx/grammar/grammar-protocol.ts'

const FORMAT = { type: 'json_object' as const }

/** A fake serving worker: records the steps it gets, answers when told. */
function worker () {
  const channel = new MessageChannel()
  const got: ToMatcher[] = []
  const waiting: Array<() => void> = []
  channel.port1.on('message', (message: ToMatcher) => {
    got.push(message)
    waiting.shift()?.()
  })
  return {
    port: channel.port2 as MessagePort,
    got,
    next: () => new Promise<void>(resolve => waiting.push(resolve)),
    answer: (seq: number, allowed: number[]) => {
      const mask = new Int32Array(1)
      for (const id of allowed) mask[0] |= 1 << id
      channel.port1.postMessage({ type: 'mask', seq, mask })
    },
    close: () => channel.port1.close(),
  }
}

t.test('a first step unanswered when the worker is replaced goes to the new worker', async t => {
  const client = new GrammarClient()
  const first = worker()
  client.setPort(first.port, 'account')
  const constraint = client.constraint(FORMAT, 'account')
  const read = first.next()
  const prepared = constraint.prepare()
  await read
  t.match(first.got[0], { type: 'step', tokens: [], open: { format: FORMAT } }, 'the first step opens the matcher')
  const second = worker()
  const resent = second.next()
  client.setPort(second.port, 'account') // the first worker was retired before it answered
  await resent
  t.match(second.got[0], { type: 'step', tokens: [], open: { format: FORMAT } }, 'sent again to the new worker')
  second.answer((second.got[0] as { seq: number }).seq, [3, 5])
  await prepared
  const asked = second.next()
  t.ok(constraint.accept(5), 'an allowed token is taken')
  await asked
  t.match(second.got[1], { type: 'step', tokens: [5] }, 'and sent with the next step at once, to the new worker')
  t.notOk('open' in second.got[1])
  second.answer((second.got[1] as { seq: number }).seq, [2])
  await constraint.prepare()
  t.notOk(constraint.accept(4), 'a token the mask forbids is refused here')
  first.close()
  second.close()
})

t.test('a later step fails when its worker is replaced: the matcher was there', async t => {
  const client = new GrammarClient()
  const first = worker()
  client.setPort(first.port, 'account')
  const constraint = client.constraint(FORMAT, 'account')
  let read = first.next()
  const opened = constraint.prepare()
  await read
  first.answer((first.got[0] as { seq: number }).seq, [1])
  await opened
  read = first.next()
  constraint.accept(1)
  await read
  const second = worker()
  client.setPort(second.port, 'account')
  await t.rejects(constraint.prepare(), /replaced/)
  first.close()
  second.close()
})

t.test('each sequence\'s steps go to its own scope\'s worker; a busy worker holds up only its scope', async t => {
  const client = new GrammarClient()
  const a = worker()
  const b = worker()
  client.setPort(a.port, 'a')
  client.setPort(b.port, 'b')
  const ofB = client.constraint(FORMAT, 'b')
  const readB = b.next()
  const waitingB = ofB.prepare()
  await readB // b's worker got the step and does not answer (compiling)
  const ofA = client.constraint(FORMAT, 'a')
  const readA = a.next()
  const preparedA = ofA.prepare()
  await readA
  a.answer((a.got[0] as { seq: number }).seq, [1])
  await preparedA
  t.ok(ofA.accept(1), 'A got its mask while B\'s worker was busy')
  t.equal(b.got.length, 1, 'B\'s worker saw only B\'s step')
  t.match(a.got[0], { type: 'step', open: { key: /^a/ } })
  b.answer((b.got[0] as { seq: number }).seq, [2])
  await waitingB
  t.ok(ofB.accept(2))
  a.close()
  b.close()
})
