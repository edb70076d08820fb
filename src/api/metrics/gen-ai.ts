// The OpenTelemetry GenAI semantic conventions' model server histograms
// (gen_ai.server.request.duration, gen_ai.server.time_to_first_token,
// gen_ai.server.time_per_output_token), with the conventions' bucket advice,
// under the names an OpenTelemetry-to-Prometheus translation gives them (dots
// to underscores, the unit as a suffix), so a dashboard built on the
// conventions finds them. Their attributes become labels the same way
// (gen_ai_operation_name, gen_ai_request_model, ...), with model_name beside.

import { Histogram, type Registry } from 'prom-client'

/** The conventions' bucket advice. */
const REQUEST_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
const TIME_TO_FIRST_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
const TIME_PER_OUTPUT_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]

/** gen_ai.operation.name for every door: a chat completion, a response and a message are all chat. */
export const GEN_AI_OPERATION = 'chat'
/** gen_ai.provider.name: chatd serves every model itself, local or relayed. */
export const GEN_AI_PROVIDER = 'chatd'

const LABELS = ['model_name', 'gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'gen_ai_response_model'] as const
type Label = typeof LABELS[number]

export class GenAiMetrics {
  readonly requestDuration: Histogram<Label | 'error_type'>
  readonly timeToFirstToken: Histogram<Label>
  readonly timePerOutputToken: Histogram<Label>

  constructor (registry: Registry) {
    const registers = [registry]
    this.requestDuration = new Histogram({
      name: 'gen_ai_server_request_duration_seconds',
      help: 'gen_ai.server.request.duration: time from the request\'s checks starting to its last output (or its failure, with error_type: the error code), in seconds.',
      labelNames: [...LABELS, 'error_type'] as const,
      buckets: REQUEST_DURATION_BUCKETS,
      registers,
    })
    this.timeToFirstToken = new Histogram({
      name: 'gen_ai_server_time_to_first_token_seconds',
      help: 'gen_ai.server.time_to_first_token: for requests that ended well, the time to their first generated output, in seconds.',
      labelNames: LABELS,
      buckets: TIME_TO_FIRST_TOKEN_BUCKETS,
      registers,
    })
    this.timePerOutputToken = new Histogram({
      name: 'gen_ai_server_time_per_output_token_seconds',
      help: 'gen_ai.server.time_per_output_token: for requests that ended well with more than one token, the time from the first output to the last over the tokens after the first, in seconds.',
      labelNames: LABELS,
      buckets: TIME_PER_OUTPUT_TOKEN_BUCKETS,
      registers,
    })
  }

  /** The labels of a request for `model` (the resolved model: what was asked for and what answered are the same). */
  static labels (model: string): Record<Label, string> {
    return { model_name: model, gen_ai_operation_name: GEN_AI_OPERATION, gen_ai_provider_name: GEN_AI_PROVIDER, gen_ai_request_model: model, gen_ai_response_model: model }
  }
}
