// The Messages door's two halves without HTTP: thinking sent back (its signature chatd's for this
// account, another's, forged or missing) is never an error, never reaches the prompt and is never
// opened (work that would change nothing); the stream builder's events add up to its message
// however a tool call is cut into pieces; Anthropic's usage leaves cached prompt tokens out of
// input_tokens.
import t from 'tap'
import { DEFAULT_INPUT_LIMITS } from '../../src/api/pipeline/input-limits.ts'
import { anthropicUsage, MessageBuilder, toolInput } from '../../src/api/messages/render.ts'
import type { MessagesRequest } from '../../src/api/messages/schema.ts'
import { toCompletionRequest } from '../../src/api/messages/to-request.ts'
import { ReasoningSeal } from '../../src/api/reasoning-seal.ts'

const seal = new ReasoningSeal('test secret')

t.test('thinking sent back: never an error, never in the prompt, never opened', async t => {
  const mine = seal.seal(7, 'private thoughts')
  const other = seal.seal(8, 'private thoughts')
  const body = {
    model: 'm',
    max_tokens: 10,
    messages: [
      { role: 'user', content: 'q' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'private thoughts', signature: mine },
          { type: 'thinking', thinking: 'private thoughts', signature: other },
          { type: 'thinking', thinking: 'made up', signature: 'chatd1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' },
          { type: 'redacted_thinking', data: mine },
          { type: 'thinking', thinking: 'no signature' },
          { type: 'text', text: 'answer' },
        ],
      },
      { role: 'user', content: 'next' },
    ],
  } as MessagesRequest
  /** Counts what is opened: thinking sent back must not be (a megabyte of forged signatures would be work for nothing). */
  class CountingSeal extends ReasoningSeal {
    opened = 0
    override open (...args: Parameters<ReasoningSeal['open']>): ReturnType<ReasoningSeal['open']> {
      this.opened++
      return super.open(...args)
    }
  }
  const counting = new CountingSeal('test secret')
  for (const accountId of [7, 8]) {
    const translated = toCompletionRequest(body, { accountId, seal: counting, limits: DEFAULT_INPUT_LIMITS })
    t.notMatch(JSON.stringify(translated.request.messages), /thoughts|made up/, 'no thinking reaches the prompt')
    t.same(translated.request.messages.map(m => m.content), ['q', 'answer', 'next'])
  }
  t.equal(counting.opened, 0, 'no signature was opened')
})

t.test('the builder: stream events add up to its message, whatever the pieces', async t => {
  const ctx = { id: 'msg_x', model: 'm', accountId: 7, seal, thinkingDisplay: 'summarized' as const }
  const script = [
    { type: 'delta' as const, reasoning: 'hmm' },
    { type: 'delta' as const, content: 'Calling.' },
    // A call whose name comes after its id, then arguments in pieces, then a second call.
    { type: 'delta' as const, toolCalls: [{ index: 0, id: 'call_a' }] },
    { type: 'delta' as const, toolCalls: [{ index: 0, name: 'get_', arguments: '{"ci' }] },
    { type: 'delta' as const, toolCalls: [{ index: 0, arguments: 'ty":"Oslo"}' }] },
    { type: 'delta' as const, toolCalls: [{ index: 1, id: 'toolu_b', name: 'other', arguments: '' }] },
    { type: 'delta' as const, toolCalls: [{ index: 1, arguments: '{}' }] },
  ]
  const builder = new MessageBuilder(ctx)
  const events = [builder.start(), ...script.flatMap(e => builder.delta(e)), ...builder.finish('tool_calls', { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 })]
  const message = builder.message('tool_calls', { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 })
  t.equal(message.stop_reason, 'tool_use')
  t.same(message.content.map(b => b.type), ['thinking', 'text', 'tool_use', 'tool_use'])
  t.match(message.content[2], { type: 'tool_use', id: 'toolu_call_a', name: 'get_', input: { city: 'Oslo' } }, 'the name as it stood when the block opened; the arguments whole')
  t.match(message.content[3], { id: 'toolu_b', name: 'other', input: {} })
  t.equal(seal.open(7, (message.content[0] as { signature: string }).signature), 'hmm', 'the signature opens to the thinking')
  // Replayed as a client would: the same blocks.
  const rebuilt: any[] = []
  for (const e of events as any[]) {
    if (e.type === 'content_block_start') rebuilt[e.index] = { ...e.content_block, json: '' }
    if (e.type === 'content_block_delta') {
      const b = rebuilt[e.index]
      if (e.delta.type === 'text_delta') b.text += e.delta.text
      if (e.delta.type === 'thinking_delta') b.thinking += e.delta.thinking
      if (e.delta.type === 'signature_delta') b.signature = e.delta.signature
      if (e.delta.type === 'input_json_delta') b.json += e.delta.partial_json
    }
    if (e.type === 'content_block_stop') {
      const b = rebuilt[e.index]
      if (b.type === 'tool_use') b.input = toolInput(b.json)
      delete b.json
    }
  }
  t.same(rebuilt, message.content)
  t.same(events.map(e => e.type).filter(type => type.startsWith('message')), ['message_start', 'message_delta', 'message_stop'])
})

t.test('usage: input_tokens leaves out cache reads; a cut call\'s input is still an object', async t => {
  t.same(anthropicUsage({ prompt_tokens: 100, completion_tokens: 7, total_tokens: 107, prompt_tokens_details: { cached_tokens: 60 } }),
    { input_tokens: 40, output_tokens: 7, cache_read_input_tokens: 60, cache_creation_input_tokens: 0 })
  t.same(anthropicUsage({ prompt_tokens: 5, completion_tokens: 0, total_tokens: 5, prompt_tokens_details: { cached_tokens: 9 } }).input_tokens, 0, 'never negative')
  t.same(toolInput('{"city":"Os'), {})
  t.same(toolInput('[1]'), {})
  t.same(toolInput(''), {})
})
