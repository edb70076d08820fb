// npm run docs:metrics: every metric /metrics exposes is explained once, in
// its help text in src/api/metrics/ (what prom-client prints after # HELP),
// and written from there into docs/operations.md's tables, between the
// metrics:start and metrics:end markers. test/docs/metrics-docs.test.ts renders
// the tables again and fails when the file differs from what this writes.

import { readFileSync, writeFileSync } from 'node:fs'
import { Metrics } from '../src/api/metrics/metrics.ts'

const ROOT = new URL('..', import.meta.url).pathname
export const OPERATIONS_DOC = 'docs/operations.md'
export const START_MARKER = '<!-- metrics:start -->'
export const END_MARKER = '<!-- metrics:end -->'

interface Section {
  title: string
  intro: string
  /** Which metrics belong here, by name. */
  has: (name: string) => boolean
}

const SECTIONS: Section[] = [
  {
    title: 'Serving (vLLM\'s names)',
    intro: 'Labelled `model_name`, with vLLM\'s buckets. Shown with the default prefix `vllm:`; with `METRICS_FAMILY_PREFIX=chatd:` each is `chatd:` and the same suffix.',
    has: name => name.startsWith('vllm:'),
  },
  {
    title: 'OpenTelemetry GenAI',
    intro: 'The GenAI semantic conventions\' model server histograms, with their bucket advice, under the names an OpenTelemetry-to-Prometheus translation gives them; labelled `model_name` and the conventions\' attributes.',
    has: name => name.startsWith('gen_ai_'),
  },
  {
    title: 'Local engines and upstreams',
    intro: 'chatd\'s own, labelled `model_name`.',
    has: name => ['chatd_engine_steps_total', 'chatd_engine_step_tokens_total', 'chatd_prefix_cache_usage_perc', 'chatd_upstream_response_seconds'].includes(name),
  },
  {
    title: 'Per account (`METRICS_ACCOUNTS_TOP`)',
    intro: 'Present only with `METRICS_ACCOUNTS_TOP` above 0; labelled `model_name` and `account` (an account id, or `other`).',
    has: name => name.startsWith('chatd_account_'),
  },
  {
    title: 'chatd\'s first families',
    intro: 'The families chatd exposed before the ones above, unchanged: labelled `model` (not `model_name`) where they are per model.',
    has: name => name.startsWith('chatd_'),
  },
]

/** prom-client's default process metrics: listed in one line, not one by one. */
function isProcessMetric (name: string): boolean {
  return name.startsWith('chatd_process_') || name.startsWith('chatd_nodejs_')
}

function cell (text: string): string {
  return text.replace(/\|/g, '\\|')
}

interface Family { name: string; type: string; labels: string[]; help: string }

function families (): Family[] {
  // Every family registered: the per-account ones exist only with METRICS_ACCOUNTS_TOP.
  const metrics = new Metrics({ accountsTop: 1 })
  return metrics.registry.getMetricsAsArray().map(m => {
    const metric = m as unknown as { name: string; help: string; type: string; labelNames: string[] }
    return { name: metric.name, type: metric.type, labels: metric.labelNames, help: metric.help }
  })
}

/** The markdown that goes between the markers in docs/operations.md. */
export function renderMetricsTables (): string {
  const all = families()
  const out: string[] = []
  const placed = new Set<string>()
  for (const section of SECTIONS) {
    const rows = all.filter(f => !placed.has(f.name) && !isProcessMetric(f.name) && section.has(f.name))
    if (rows.length === 0) continue
    out.push(`### ${section.title}`, '', section.intro, '', '| metric | type | labels | meaning |', '|---|---|---|---|')
    for (const f of rows) {
      placed.add(f.name)
      out.push(`| \`${f.name}\` | ${f.type} | ${f.labels.map(l => `\`${l}\``).join(', ')} | ${cell(f.help)} |`)
    }
    out.push('')
  }
  const process = all.filter(f => isProcessMetric(f.name)).map(f => f.name)
  out.push('### The process', '', `prom-client's default metrics of the Node process, prefixed \`chatd_\`: ${process.map(n => `\`${n}\``).join(', ')}.`, '')
  const left = all.filter(f => !placed.has(f.name) && !isProcessMetric(f.name))
  if (left.length > 0) throw new Error(`docs-metrics: no section for ${left.map(f => f.name).join(', ')}`)
  return out.join('\n')
}

/** `doc` with the text between the markers replaced by `tables`. */
export function spliceMetricsTables (doc: string, tables: string): string {
  const start = doc.indexOf(START_MARKER)
  const end = doc.indexOf(END_MARKER)
  if (start === -1 || end === -1 || end < start) throw new Error(`docs-metrics: ${OPERATIONS_DOC} needs ${START_MARKER} and then ${END_MARKER}`)
  return `${doc.slice(0, start + START_MARKER.length)}\n\n${tables}\n${doc.slice(end)}`
}

if (import.meta.main) {
  const path = ROOT + OPERATIONS_DOC
  writeFileSync(path, spliceMetricsTables(readFileSync(path, 'utf8'), renderMetricsTables()))
  console.log(`wrote ${OPERATIONS_DOC} (between the metrics markers)`)
}
