// POST /api/v1/responses: OpenAI's Responses API, the wire format of the Codex
// CLI and the Agents SDK. A door onto the one completion pipeline (pipeline.ts:
// limits, usage rows, admission, shaping and generation live there): the body
// becomes chatd's completion request (to-request.ts), and the events come back as the `response`
// object or its typed stream (output.ts). Finished responses are kept for
// previous_response_id unless `store` is false (store-port.ts).

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.ts'
import { errorResponses } from '../error-schema.ts'
import { hostedSearchRounds } from '../pipeline/hosted-search.ts'
import type { ReasoningSeal } from '../reasoning-seal.ts'
import type { CompletionPipeline, StartedCompletion } from '../pipeline/pipeline.ts'
import { nullMeansAbsent } from '../chat/schema.ts'
import { failedWhileStreaming, streamGeneration } from '../pipeline/sse.ts'
import { readWholeReply, type AnsweredFinish } from '../pipeline/whole-reply.ts'
import { newId } from './ids.ts'
import { OutputAssembler, responseShell, responseUsage, type StreamEvent } from './output.ts'
import { ResponseObject, ResponsesRequest } from './schema.ts'
import type { ResponseStorePort } from './store-port.ts'
import { toCompletionRequest } from './to-request.ts'

export interface ResponsesRouteOptions {
  /** Checks, limits, metering and generation, shared with the other doors. */
  pipeline: CompletionPipeline
  /** Seals the thinking handed out as encrypted_content, and opens what comes back. */
  reasoningSeal: ReasoningSeal
  /** Where finished responses are kept; without one nothing is stored and previous_response_id is not found. */
  stored?: ResponseStorePort
  sseKeepAliveMs: number
}

/** The finished response object: the shell, the output, how it ended, the usage. */
function finished (shell: Record<string, unknown>, assembler: OutputAssembler, finish: AnsweredFinish): Record<string, unknown> {
  const incomplete = finish.reason === 'length'
  return {
    ...shell,
    status: incomplete ? 'incomplete' : 'completed',
    completed_at: incomplete ? null : Math.floor(Date.now() / 1000),
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    output: assembler.output,
    usage: responseUsage(finish.usage),
  }
}

export const responsesRoute: FastifyPluginAsyncTypebox<ResponsesRouteOptions> = async (app, { pipeline, reasoningSeal, stored, sseKeepAliveMs }) => {
  const metrics = pipeline.metrics

  app.post('/responses', {
    schema: {
      tags: ['responses'],
      summary: 'Create a response (OpenAI Responses API)',
      description: 'Returns one `response` object, or with `stream: true` a text/event-stream of typed events (response.created … response.completed). See docs/api.md for the fields chatd supports, ignores and refuses.',
      security: [{ bearerAuth: [] }],
      body: ResponsesRequest,
      response: {
        200: { description: 'The response', content: { 'application/json': { schema: ResponseObject }, 'text/event-stream': { schema: ResponseObject } } },
        ...errorResponses,
      },
    },
    // null means absent for every optional field (clients send null for "not set").
    preValidation: async request => {
      nullMeansAbsent(request.body, ResponsesRequest as unknown as Parameters<typeof nullMeansAbsent>[1])
    },
  }, async (request, reply) => {
    const body = request.body
    const accountId = request.account!.id // bearerAuth admits no request without one
    // A stored conversation read and parsed, thousands of input items checked and translated: work
    // before the request's size is known, never for a key past its limits (the admission itself
    // comes once the conversation is translated).
    await pipeline.precheck(request, body.model)
    let chain: Array<Record<string, unknown>> | undefined
    if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
      chain = stored ? await stored.chain(accountId, body.previous_response_id) : undefined
      if (chain === undefined) {
        throw new ApiError('not_found', `No response with id '${body.previous_response_id.slice(0, 256)}' was found.`, { param: 'previous_response_id' })
      }
    }
    const translation = toCompletionRequest(body, { chain, searchConfigured: pipeline.searchConfigured })
    const id = newId('resp')
    const createdAt = Math.floor(Date.now() / 1000)
    /** The output's assembler: `emit` receives its stream events (none for a whole response). */
    const assemble = (emit?: (event: StreamEvent) => Promise<void>): OutputAssembler => new OutputAssembler({
      ...(emit ? { emit } : {}),
      targets: translation.tools.targets,
      ...(body.include?.includes('reasoning.encrypted_content') ? { seal: (thinking: string) => reasoningSeal.seal(accountId, thinking) } : {}),
    })
    const search = pipeline.webSearch
    const started = await pipeline.start(request, reply, translation.request, {
      id,
      fields: translation.fields,
      // The model asks for searches itself; chatd runs them between rounds of the one reply.
      ...(translation.tools.webSearch && search ? { continueAfterCalls: hostedSearchRounds(search, { scope: String(accountId), maxUses: body.max_tool_calls ?? undefined }) } : {}),
    })
    if (started === undefined) return reply // the client left before generation started
    const store = body.store !== false && stored !== undefined
    const shell = responseShell(body, { id, createdAt, model: started.model.id, store })
    const save = async (response: Record<string, unknown>): Promise<void> => {
      if (!store) return
      try {
        await stored!.save({ id, accountId, previousResponseId: body.previous_response_id ?? null, model: started.model.id, createdAt, response, input: translation.storedInput() })
      } catch (err) {
        // The response itself is fine; the client learns it was not kept when it asks for it.
        request.log.error({ err, responseId: id }, 'storing the response failed')
      }
    }

    if (!body.stream) {
      const assembler = assemble()
      const finish = await readWholeReply(request, started, event => assembler.delta(event), event => assembler.search(event))
      if (finish === undefined) return reply // the client left: nobody to answer
      await assembler.finish(finish.reason)
      const response = finished(shell, assembler, finish)
      await save(response)
      return reply.type('application/json; charset=utf-8').send(response as ResponseObject)
    }

    return streamResponse(request, reply, started, {
      keepAliveMs: sseKeepAliveMs,
      shell,
      assemble,
      save,
      onError: code => metrics.errors.inc({ code }),
    })
  })
}

/**
 * Streams the response as typed events numbered by sequence_number. As the chat door does, the
 * status line waits for the backend's first event or refusal (a refusal keeps its HTTP status and
 * JSON body) for at most one keep-alive interval; a failure after that is a response.failed event.
 */
async function streamResponse (request: FastifyRequest, reply: FastifyReply, started: StartedCompletion, opts: {
  keepAliveMs: number
  shell: Record<string, unknown>
  assemble: (emit: (event: StreamEvent) => Promise<void>) => OutputAssembler
  save: (response: Record<string, unknown>) => Promise<void>
  onError: (code: string) => void
}): Promise<FastifyReply> {
  const { shell } = opts
  return streamGeneration(request, reply, started.events, { keepAliveMs: opts.keepAliveMs, stop: started.stop }, sse => {
    let sequence = 0
    const send = (event: StreamEvent): Promise<void> => sse.event(event.type, { ...event, sequence_number: sequence++ })
    const assembler = opts.assemble(send)
    return {
      open: async slow => {
        if (slow) await sse.comment('keep-alive')
        await send({ type: 'response.created', response: shell })
        await send({ type: 'response.in_progress', response: shell })
      },
      delta: event => assembler.delta(event),
      search: event => assembler.search(event),
      finish: async event => {
        await assembler.finish(event.reason)
        const response = finished(shell, assembler, event)
        await opts.save(response)
        await send({ type: response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', response })
      },
      fail: async err => {
        const apiError = failedWhileStreaming(request, err, 'The response failed while streaming.')
        opts.onError(apiError.code)
        await send({
          type: 'response.failed',
          response: { ...shell, status: 'failed', error: { code: apiError.code, message: apiError.message }, output: assembler.output },
        })
      },
    }
  })
}
