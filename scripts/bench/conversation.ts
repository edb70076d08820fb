// The multi-turn scenario: a chat of four turns, each adding a user message of
// about 300 tokens to the conversation, which the client sends whole every
// turn, as chat clients do; time to first token per turn, each turn sent a
// while after the previous reply ended (a user reading it and typing).
// The assistant turns in the history are, by default, the replies chatd gave
// (about 128 tokens each), sent back as a chat client does: the cached server
// runs first and the others are sent the very prompts it was sent. Then a
// server that computes a reply's next turn ahead computes only the new ~300
// tokens. With fixed answers instead (--turn-replies fixed: texts no server
// wrote), every turn after the first finds its predecessor's prompt in a
// prompt cache and computes the new ~430 tokens, or, without one, everything.
import { setTimeout as sleep } from 'node:timers/promises'
import type OpenAI from 'openai'
import type { ChatMessage } from '../../src/engine/backend.ts'
import type { LocalEngine } from '../../src/engine/onnx/scheduler/engine.ts'

const WORDS = ('the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near old ' +
  'harbors where sailors mend nets and children chase kites under silver clouds before supper').split(' ')

export interface ConversationPlan {
  /** The messages each turn sends: user 1; user 1, answer 1, user 2; ... */
  turns: ChatMessage[][]
  /** The token ids of each turn's prompt, exactly as chatd feeds them (what llama-server is sent, so both compute the same tokens). */
  promptIds: number[][]
  /** Prompt tokens per turn. */
  promptTokens: number[]
}

/**
 * A conversation of `turns` turns; `seed` varies the words, so each round's conversation is new
 * to every cache (a repeat of the last round's first turn would be a hit).
 */
export function planConversation (engine: LocalEngine, opts: { turns: number; userTokens: number; answerTokens: number; seed: number }): ConversationPlan {
  let state = opts.seed * 7919 + 17
  const word = (): string => {
    state = (state * 1103515245 + 12345) % 2147483648
    return WORDS[state % WORDS.length]
  }
  const text = (tokens: number): string => {
    let out = `(${opts.seed}) `
    while (engine.tokenizer.encode(out).length < tokens) out += word() + ' '
    return out.trim()
  }
  const history: ChatMessage[] = []
  const turns: ChatMessage[][] = []
  for (let i = 0; i < opts.turns; i++) {
    history.push({ role: 'user', content: text(opts.userTokens) })
    turns.push([...history])
    history.push({ role: 'assistant', content: text(opts.answerTokens) })
  }
  return {
    turns,
    promptIds: turns.map(messages => engine.encodePrompt({ messages })),
    promptTokens: turns.map(messages => engine.encodePrompt({ messages }).length),
  }
}

export interface ConversationRun {
  /** Seconds to the first streamed token of each turn. */
  ttft: number[]
  /** The messages each turn sent. */
  turns: ChatMessage[][]
}

/**
 * chatd: seconds to the first streamed token of each turn, `gapMs` after the previous reply ended
 * (a user reading it and typing). With `ownReplies`, each turn's history holds the replies this
 * server gave, as the client received them (a chat client sends them back): the plan's user
 * messages are sent and its fixed answers left out, and each turn generates `gen` tokens, which
 * become that reply.
 */
export async function chatdConversation (client: OpenAI, model: string, plan: ConversationPlan, gen: number, opts: { gapMs?: number; ownReplies?: boolean } = {}): Promise<ConversationRun> {
  const ttft: number[] = []
  const turns: ChatMessage[][] = []
  const history: ChatMessage[] = []
  for (const [i, planned] of plan.turns.entries()) {
    if (i > 0 && opts.gapMs) await sleep(opts.gapMs)
    const messages = opts.ownReplies ? [...history, planned[planned.length - 1]] : planned
    turns.push(messages)
    const started = performance.now()
    let first: number | null = null
    let reply = ''
    const stream = await client.chat.completions.create({ model, messages: messages as OpenAI.ChatCompletionMessageParam[], max_tokens: gen, temperature: 0, stream: true })
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined
      if (first === null && ((delta?.content ?? '') !== '' || (delta?.reasoning_content ?? '') !== '')) first = performance.now()
      reply += delta?.content ?? ''
    }
    ttft.push(((first ?? performance.now()) - started) / 1000)
    history.splice(0, history.length, ...messages, { role: 'assistant', content: reply })
  }
  return { ttft, turns }
}

/** llama-server with its prompt cache: seconds to the first streamed token of each turn, `gapMs` apart. */
export async function llamaServerConversation (server: { timeToFirstToken: (prompt: number[], gen: number) => Promise<number> }, promptIds: number[][], gen: number, gapMs = 0): Promise<number[]> {
  const ttft: number[] = []
  for (const [i, prompt] of promptIds.entries()) {
    if (i > 0 && gapMs) await sleep(gapMs)
    ttft.push(await server.timeToFirstToken(prompt, gen))
  }
  return ttft
}
