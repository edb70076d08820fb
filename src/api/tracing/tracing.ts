// OpenTelemetry traces, exported over OTLP/HTTP (protobuf) by the official
// OpenTelemetry JS SDK when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Off by default, and then free:
// nothing here runs and the SDK is never loaded (it is imported only by
// `Tracing.start`). The provider is the app's own, not registered globally,
// so several apps in one process keep their traces apart; the W3C trace
// context propagator reads an incoming `traceparent` and writes the one sent
// to upstream models.
//
// Sampling is parent-based: a request whose traceparent says sampled (or not)
// is traced (or not) as its caller decided; one without a traceparent is
// sampled at OTEL_TRACES_SAMPLER_ARG (a ratio, 1 by default). Prompts and
// outputs never go into spans unless
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true.

import type { IncomingHttpHeaders } from 'node:http'
import { ROOT_CONTEXT, type Context, type TextMapPropagator, type Tracer } from '@opentelemetry/api'
import type { TracingSettings } from '../../config.ts'

export type { TracingSettings }

/** Most characters of prompt or output one span attribute takes, with capture on. */
export const CONTENT_LIMIT = 64 * 1024

interface Provider {
  forceFlush (): Promise<void>
  shutdown (): Promise<void>
}

export class Tracing {
  readonly tracer: Tracer
  readonly captureContent: boolean
  readonly #propagator: TextMapPropagator
  readonly #provider: Provider

  private constructor (tracer: Tracer, propagator: TextMapPropagator, provider: Provider, captureContent: boolean) {
    this.tracer = tracer
    this.#propagator = propagator
    this.#provider = provider
    this.captureContent = captureContent
  }

  /** Loads the SDK and starts exporting. */
  static async start (settings: TracingSettings): Promise<Tracing> {
    const [{ TracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler }, { OTLPTraceExporter }, { resourceFromAttributes }, { W3CTraceContextPropagator }] = await Promise.all([
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/exporter-trace-otlp-proto'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/core'),
    ])
    const exporter = new OTLPTraceExporter({ url: settings.url, headers: settings.headers })
    const provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.sampleRatio) }),
      spanProcessors: [new BatchSpanProcessor({ exporter, ...(settings.exportDelayMs !== undefined ? { scheduledDelayMillis: settings.exportDelayMs } : {}) })],
    })
    return new Tracing(provider.getTracer('chatd'), new W3CTraceContextPropagator(), provider, settings.captureContent)
  }

  /** The caller's trace context from a request's `traceparent` and `tracestate`; the root context when there is none (or it is malformed). */
  extract (headers: IncomingHttpHeaders): Context {
    return this.#propagator.extract(ROOT_CONTEXT, headers, {
      keys: carrier => Object.keys(carrier),
      get: (carrier, key) => carrier[key],
    })
  }

  /** The `traceparent` (and `tracestate`) headers that carry `context` on to another server. */
  inject (context: Context): Record<string, string> {
    const headers: Record<string, string> = {}
    this.#propagator.inject(context, headers, { set: (carrier, key, value) => { carrier[key] = value } })
    return headers
  }

  /** Sends the spans that finished and are still waiting. */
  flush (): Promise<void> {
    return this.#provider.forceFlush()
  }

  /** Sends what is left and stops. */
  shutdown (): Promise<void> {
    return this.#provider.shutdown()
  }
}
