// Chat completions (OpenAI's /chat/completions, as vLLM, llama.cpp, Ollama and
// chatd serve it): the body is request-body.ts's, the chunks are read by reply.ts.

import type { GenerateRequest } from '../backend.ts'
import { relayedParamRefused, retryableStatus } from './failures.ts'
import { readChunk, readCompletion, type ReplyPiece } from './reply.ts'
import { upstreamBody } from './request-body.ts'
import { bearer, type StreamReader, type Wire, type WireModel } from './wire.ts'

class ChatStreamReader implements StreamReader {
  done = false

  read (event: string | undefined, data: string): ReplyPiece | undefined {
    if (data.trim() === '[DONE]') {
      this.done = true
      return undefined
    }
    // Named events other than "error" (pings, vendor extras) are not part of the reply.
    if (event !== undefined && event !== 'message' && event !== 'error') return undefined
    if (data.trim() === '') return undefined
    return readChunk(data)
  }
}

export function chatWire (model: WireModel): Wire {
  return {
    api: 'chat',
    path: 'chat/completions',
    headers: bearer,
    body: (request: GenerateRequest) => upstreamBody(request, model),
    sendsStop: true,
    separatesReasoning: false,
    streamReader: () => new ChatStreamReader(),
    readWhole: readCompletion,
    retryable: retryableStatus,
    relayedParam: relayedParamRefused,
  }
}
