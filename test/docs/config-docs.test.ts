// The settings are documented once, in src/config.ts's schema: docs/configuration.md's
// tables and .env.example are written from it by `npm run docs:config`. This renders
// both again and fails when a checked-in file differs, so a new or changed setting
// cannot reach one place and not the other.

import { readFileSync } from 'node:fs'
import t from 'tap'
import { ConfigSchema } from '../../src/config.ts'
import { CONFIG_DOC, END_MARKER, ENV_EXAMPLE, renderConfigTables, renderEnvExample, spliceConfigTables, START_MARKER } from '../../scripts/docs-config.ts'

const ROOT = new URL('../..', import.meta.url).pathname
const STALE = 'run npm run docs:config'

t.test('every setting has a description', async t => {
  for (const [name, schema] of Object.entries(ConfigSchema.properties)) {
    t.ok((schema as { description?: string }).description, `${name} is described in src/config.ts`)
  }
})

t.test(`${CONFIG_DOC}'s settings tables are the schema's`, async t => {
  const doc = readFileSync(ROOT + CONFIG_DOC, 'utf8')
  t.ok(doc.includes(START_MARKER) && doc.includes(END_MARKER), `${CONFIG_DOC} has the config markers`)
  const tables = renderConfigTables()
  t.ok(doc === spliceConfigTables(doc, tables), `${CONFIG_DOC}'s tables differ from src/config.ts: ${STALE}`)
  for (const name of Object.keys(ConfigSchema.properties)) t.ok(tables.includes(`| \`${name}\` |`), `${name} is in the table`)
})

t.test(`${ENV_EXAMPLE} is the schema's`, async t => {
  const file = readFileSync(ROOT + ENV_EXAMPLE, 'utf8')
  const rendered = renderEnvExample()
  t.ok(file === rendered, `${ENV_EXAMPLE} differs from src/config.ts: ${STALE}`)
  for (const name of Object.keys(ConfigSchema.properties)) t.match(rendered, new RegExp(`^(# )?${name}=`, 'm'), `${name} is in ${ENV_EXAMPLE}`)
})

t.test('every variable is commented out: its default, or an example where it has none', async t => {
  const rendered = renderEnvExample()
  t.match(rendered, /^# PORT=8080$/m)
  t.match(rendered, /^# HOST=127\.0\.0\.1$/m)
  t.match(rendered, /^# DATABASE_URL=sqlite:\/\/data\/chatd\.db$/m)
  t.match(rendered, /^# SEARCH_PROVIDER=$/m)
  t.same(rendered.split('\n').filter(line => line !== '' && !line.startsWith('#')), [], 'no active line: a copy of the file changes nothing')
  t.match(rendered, /^# REDIS_URL=redis:\/\/127\.0\.0\.1:6379$/m)
  t.match(rendered, /^# SESSION_SECRET=$/m)
  t.match(rendered, /^# POSTGRES_PASSWORD=$/m, 'the compose files\' variables are listed too, never set')
})

t.test('the splice replaces only what is between the markers', async t => {
  const doc = `before\n${START_MARKER}\nold\n${END_MARKER}\nafter\n`
  t.equal(spliceConfigTables(doc, 'new\n'), `before\n${START_MARKER}\n\nnew\n\n${END_MARKER}\nafter\n`)
  t.throws(() => spliceConfigTables('no markers', 'x'), /config:start/)
})
