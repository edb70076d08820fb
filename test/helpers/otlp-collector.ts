// An OpenTelemetry collector stand-in on loopback: it takes OTLP/HTTP trace
// exports (POST /v1/traces) in protobuf, as chatd's exporter sends them, or in
// JSON, decodes them and keeps every span with its attributes as plain values.
// The protobuf is decoded by protobufjs over the message definitions of
// opentelemetry/proto/{collector/trace,trace,common,resource}/v1 (only their
// field numbers and types, written out below). Closed when the test ends.

import http from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import protobuf from 'protobufjs'

const KEY_VALUE = { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } }
const OTLP = protobuf.Root.fromJSON({
  nested: {
    ExportTraceServiceRequest: { fields: { resourceSpans: { rule: 'repeated', type: 'ResourceSpans', id: 1 } } },
    ResourceSpans: { fields: { resource: { type: 'Resource', id: 1 }, scopeSpans: { rule: 'repeated', type: 'ScopeSpans', id: 2 }, schemaUrl: { type: 'string', id: 3 } } },
    Resource: { fields: { attributes: { rule: 'repeated', type: 'KeyValue', id: 1 }, droppedAttributesCount: { type: 'uint32', id: 2 } } },
    ScopeSpans: { fields: { scope: { type: 'InstrumentationScope', id: 1 }, spans: { rule: 'repeated', type: 'Span', id: 2 }, schemaUrl: { type: 'string', id: 3 } } },
    InstrumentationScope: { fields: { name: { type: 'string', id: 1 }, version: { type: 'string', id: 2 }, attributes: { rule: 'repeated', type: 'KeyValue', id: 3 } } },
    Span: {
      fields: {
        traceId: { type: 'bytes', id: 1 },
        spanId: { type: 'bytes', id: 2 },
        traceState: { type: 'string', id: 3 },
        parentSpanId: { type: 'bytes', id: 4 },
        name: { type: 'string', id: 5 },
        kind: { type: 'int32', id: 6 },
        startTimeUnixNano: { type: 'fixed64', id: 7 },
        endTimeUnixNano: { type: 'fixed64', id: 8 },
        attributes: { rule: 'repeated', type: 'KeyValue', id: 9 },
        events: { rule: 'repeated', type: 'Event', id: 11 },
        status: { type: 'Status', id: 15 },
        flags: { type: 'fixed32', id: 16 },
      },
    },
    Event: { fields: { timeUnixNano: { type: 'fixed64', id: 1 }, name: { type: 'string', id: 2 }, attributes: { rule: 'repeated', type: 'KeyValue', id: 3 } } },
    Status: { fields: { message: { type: 'string', id: 2 }, code: { type: 'int32', id: 3 } } },
    KeyValue: KEY_VALUE,
    AnyValue: {
      oneofs: { value: { oneof: ['stringValue', 'boolValue', 'intValue', 'doubleValue', 'arrayValue', 'kvlistValue', 'bytesValue'] } },
      fields: {
        stringValue: { type: 'string', id: 1 },
        boolValue: { type: 'bool', id: 2 },
        intValue: { type: 'int64', id: 3 },
        doubleValue: { type: 'double', id: 4 },
        arrayValue: { type: 'ArrayValue', id: 5 },
        kvlistValue: { type: 'KeyValueList', id: 6 },
        bytesValue: { type: 'bytes', id: 7 },
      },
    },
    ArrayValue: { fields: { values: { rule: 'repeated', type: 'AnyValue', id: 1 } } },
    KeyValueList: { fields: { values: { rule: 'repeated', type: 'KeyValue', id: 1 } } },
  },
})
const REQUEST = OTLP.lookupType('ExportTraceServiceRequest')

export type AttributeValue = string | number | boolean | AttributeValue[] | undefined

export interface CollectedSpan {
  traceId: string
  spanId: string
  /** '' for a root span. */
  parentSpanId: string
  name: string
  /** 1 internal, 2 server, 3 client (OTLP's SpanKind). */
  kind: number
  startMs: number
  endMs: number
  attributes: Record<string, AttributeValue>
  events: string[]
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number
  serviceName: string
}

export interface Collector {
  /** http://127.0.0.1:<port>: OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string
  spans: CollectedSpan[]
  /** Every export body as it arrived (to search for text that must not be there). */
  bodies: Buffer[]
  /** The content types of the exports. */
  contentTypes: string[]
  /** Resolves once `test` holds for the spans so far (polled), or rejects after `ms`. */
  waitFor: (test: (spans: CollectedSpan[]) => boolean, ms?: number) => Promise<void>
}

interface Any { stringValue?: string; boolValue?: boolean; intValue?: number | string; doubleValue?: number; arrayValue?: { values?: Any[] } }

function valueOf (any: Any | undefined): AttributeValue {
  if (!any) return undefined
  if (any.stringValue !== undefined) return any.stringValue
  if (any.boolValue !== undefined) return any.boolValue
  if (any.intValue !== undefined) return Number(any.intValue)
  if (any.doubleValue !== undefined) return any.doubleValue
  if (any.arrayValue !== undefined) return (any.arrayValue.values ?? []).map(valueOf)
  return undefined
}

function attributesOf (list: Array<{ key: string; value?: Any }> | undefined): Record<string, AttributeValue> {
  return Object.fromEntries((list ?? []).map(kv => [kv.key, valueOf(kv.value)]))
}

/** An id as hex: protobuf sends bytes (base64 once made an object), JSON sends hex. */
function hex (id: string | undefined, json: boolean): string {
  if (!id) return ''
  return json ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex')
}

function spansOf (request: Record<string, any>, json: boolean): CollectedSpan[] {
  const out: CollectedSpan[] = []
  for (const rs of request.resourceSpans ?? []) {
    const serviceName = String(attributesOf(rs.resource?.attributes)['service.name'] ?? '')
    for (const ss of rs.scopeSpans ?? []) {
      for (const span of ss.spans ?? []) {
        out.push({
          traceId: hex(span.traceId, json),
          spanId: hex(span.spanId, json),
          parentSpanId: hex(span.parentSpanId, json),
          name: span.name,
          kind: Number(span.kind ?? 0),
          startMs: Number(BigInt(span.startTimeUnixNano ?? 0) / 1_000_000n),
          endMs: Number(BigInt(span.endTimeUnixNano ?? 0) / 1_000_000n),
          attributes: attributesOf(span.attributes),
          events: (span.events ?? []).map((e: { name: string }) => e.name),
          statusCode: Number(span.status?.code ?? 0),
          serviceName,
        })
      }
    }
  }
  return out
}

export async function otlpCollector (t: Test): Promise<Collector> {
  const spans: CollectedSpan[] = []
  const bodies: Buffer[] = []
  const contentTypes: string[] = []
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    const type = String(req.headers['content-type'] ?? '')
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.writeHead(404).end()
      return
    }
    bodies.push(body)
    contentTypes.push(type)
    const json = type.includes('json')
    const decoded = json
      ? JSON.parse(body.toString('utf8'))
      : REQUEST.toObject(REQUEST.decode(body), { bytes: String, longs: String, defaults: false })
    spans.push(...spansOf(decoded, json))
    // An empty ExportTraceServiceResponse: everything accepted.
    res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : '')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => new Promise<void>(resolve => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    bodies,
    contentTypes,
    async waitFor (test, ms = 15_000) {
      const deadline = Date.now() + ms
      while (!test(spans)) {
        if (Date.now() > deadline) throw new Error(`the collector did not get the expected spans within ${ms} ms; it has: ${spans.map(s => s.name).join(', ')}`)
        await new Promise(resolve => setTimeout(resolve, 20))
      }
    },
  }
}
