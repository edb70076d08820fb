// Every metric is explained once, in its help text in src/api/metrics/:
// docs/operations.md's metric tables are written from the registry by
// `npm run docs:metrics`. This renders them again and fails when the checked-in
// page differs, so a metric added, renamed or re-explained in the code cannot
// leave the page behind; and every family a running chatd exposes is in it.

import { readFileSync } from 'node:fs'
import t from 'tap'
import { Metrics } from '../../src/api/metrics/metrics.ts'
import { END_MARKER, OPERATIONS_DOC, renderMetricsTables, spliceMetricsTables, START_MARKER } from '../../scripts/docs-metrics.ts'

const ROOT = new URL('../..', import.meta.url).pathname

t.test(`${OPERATIONS_DOC}'s metric tables are the code's`, async t => {
  const doc = readFileSync(ROOT + OPERATIONS_DOC, 'utf8')
  t.ok(doc.includes(START_MARKER) && doc.includes(END_MARKER), `${OPERATIONS_DOC} has the metrics markers`)
  t.ok(doc === spliceMetricsTables(doc, renderMetricsTables()), `${OPERATIONS_DOC}'s tables differ from src/api/metrics/: run npm run docs:metrics`)
})

t.test('every family is in the tables once, with its help text', async t => {
  const tables = renderMetricsTables()
  const registry = new Metrics({ accountsTop: 1 }).registry
  for (const metric of registry.getMetricsAsArray() as unknown as Array<{ name: string; help: string }>) {
    if (/^chatd_(process|nodejs)_/.test(metric.name)) {
      t.ok(tables.includes(`\`${metric.name}\``), `${metric.name} is named`)
      continue
    }
    t.equal(tables.split(`| \`${metric.name}\` |`).length, 2, `${metric.name} has one row`)
    t.ok(tables.includes(metric.help.replace(/\|/g, '\\|')), `${metric.name}'s help text is its meaning`)
  }
})
