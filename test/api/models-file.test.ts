// models.json: validation errors name the entry, ${ENV} interpolation, and a
// model that cannot be used is listed as unavailable with a hint while the
// others keep working.

import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config.ts'
import type { Backend } from '../../src/engine/backend.ts'
import { parseModelsFile } from '../../src/engine/models-file.ts'
import { ModelRegistry } from '../../src/engine/registry.ts'
import { ScriptedBackend } from '../helpers/scripted-backend.ts'

const config = loadConfig({})

t.test('structural errors name the entry and the field', async t => {
  const cases: Array<[string, RegExp]> = [
    ['{"models":', /models\.json: not valid JSON/],
    ['[]', /expected an object \{"models": \[\.\.\.\]\}/],
    ['{"models":[{"id":"a","backend":"onnx"}]}', /models\[0\] \(id "a"\): missing "path"/],
    ['{"models":[{"id":"a","backend":"onnx","path":3}]}', /models\[0\] \(id "a"\): "path" must be string/],
    ['{"models":[{"id":"a","backend":"onnx","path":"x","reasoning":"loud"}]}', /"reasoning" .*"separate", "inline", "hidden"/],
    ['{"models":[{"backend":"onnx","path":"x"}]}', /models\[0\]: missing "id"/],
    ['{"models":[{"id":"a","backend":"tgi"}]}', /models\[0\] \(id "a"\): "backend" must be "onnx" or "openai" \(got "tgi"\)/],
    ['{"models":[{"id":"a","backend":"onnx","path":"x"},{"id":"a","backend":"onnx","path":"y"}]}', /models\[1\] \(id "a"\): duplicate id/],
    ['{"models":[{"id":"u","backend":"openai","baseUrl":"http://x"}]}', /models\[0\] \(id "u"\): missing "upstreamModel"/],
    ['{"models":[{"id":"has space","backend":"onnx","path":"x"}]}', /models\[0\] \(id "has space"\): "id" must match pattern/],
  ]
  for (const [text, message] of cases) {
    t.throws(() => parseModelsFile(text, {}), { name: 'ModelsFileError', message }, text)
  }
})

t.test('${ENV} interpolation; unset variables are reported, not fatal', async t => {
  const text = JSON.stringify({ models: [{ id: 'u', backend: 'openai', baseUrl: '${BASE}/v1', apiKey: '${KEY}', upstreamModel: 'm-${SIZE}' }] })
  t.same(parseModelsFile(text, { BASE: 'http://h:1', KEY: 'k', SIZE: '7b' }), [{
    entry: { id: 'u', backend: 'openai', baseUrl: 'http://h:1/v1', apiKey: 'k', upstreamModel: 'm-7b' },
    missingVariables: [],
  }])
  t.same(parseModelsFile(text, { BASE: 'http://h:1' })[0].missingVariables, ['KEY', 'SIZE'])
  // ${NAME:-fallback}: optional values (an upstream key Ollama does not need).
  const optional = JSON.stringify({ models: [{ id: 'u', backend: 'openai', baseUrl: '${BASE:-http://127.0.0.1:11434}/v1', apiKey: '${KEY:-}', upstreamModel: 'm' }] })
  t.same(parseModelsFile(optional, {}), [{ entry: { id: 'u', backend: 'openai', baseUrl: 'http://127.0.0.1:11434/v1', apiKey: '', upstreamModel: 'm' }, missingVariables: [] }])
  t.match(parseModelsFile(optional, { KEY: 'k' })[0].entry, { apiKey: 'k' }, 'a set variable wins over the fallback')
})

t.test('fromFile: missing files, unset variables and a bad upstream baseUrl are unavailable; others work', async t => {
  const dir = t.testdir({ 'present-model': { 'config.json': '{}' } })
  const file = join(dir, 'models.json')
  writeFileSync(file, JSON.stringify({
    models: [
      { id: 'local', backend: 'onnx', path: 'present-model', dtype: 'fp32', reasoning: 'hidden' },
      { id: 'absent', backend: 'onnx', path: 'not-downloaded' },
      { id: 'upstream', backend: 'openai', baseUrl: '${UPSTREAM_BASE_URL}', apiKey: 'x', upstreamModel: 'm' },
      { id: 'upstream2', backend: 'openai', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'm', thinkingBudget: 512 },
      { id: 'upstream3', backend: 'openai', baseUrl: 'ftp://secret-host/v1', upstreamModel: 'm' },
    ],
  }))
  const seen: Array<{ id: string; path: string; device?: string }> = []
  const registry = await ModelRegistry.fromFile(file, {
    config,
    env: {},
    factories: {
      // Stands in for the ONNX engine but keeps the real path resolution and missing-files check.
      onnx: async (entry, ctx) => {
        const { createOnnx } = await import('../../src/engine/registry.ts')
        const real = await createOnnx(entry, ctx)
        if (real.state().state === 'unavailable') return real
        seen.push({ id: entry.id, path: join(ctx.baseDir, entry.path) })
        await real.close()
        return new ScriptedBackend({ id: entry.id }) as Backend
      },
    },
  })
  t.same(registry.list().map(m => m.id), ['local', 'absent', 'upstream', 'upstream2', 'upstream3'])
  t.same(seen, [{ id: 'local', path: join(dir, 'present-model') }], 'relative paths resolve against the models.json directory')
  t.equal(registry.get('local')?.reasoning, 'hidden')
  t.same(registry.state('local'), { state: 'ready' })
  // No hubRepo: `chatd pull` would refuse (nowhere to download from), so the hint says what to do instead.
  t.same(registry.state('absent'), {
    state: 'unavailable',
    reason: `model files not found at ${join(dir, 'not-downloaded')}`,
    hint: `put the model directory (Hugging Face / onnx-community layout: config.json, generation_config.json, tokenizer.json, tokenizer_config.json, onnx/model_q4.onnx) at ${join(dir, 'not-downloaded')}, or add "hubRepo" (the Hugging Face repository it comes from) to its entry in models.json and run: npx chatd pull absent`,
    summary: 'its files are not on this server yet',
  })
  t.notMatch(registry.state('absent'), { hint: /^run: npx chatd pull/ }, 'not told to run a pull that refuses')
  t.same(registry.state('upstream'), { state: 'unavailable', reason: 'environment variable UPSTREAM_BASE_URL not set', hint: 'set UPSTREAM_BASE_URL in the environment or .env', summary: 'its configuration on this server is incomplete' })
  t.same(registry.state('upstream2'), { state: 'ready' }, 'an upstream is ready at once; whether it answers is found out per request')
  t.equal(registry.get('upstream2')?.thinkingBudget, 512)
  t.equal(registry.get('local')?.thinkingBudget, 0)
  t.same(registry.state('upstream3'), { state: 'unavailable', reason: 'baseUrl must start with http:// or https://' }, 'the reason does not echo the URL')
  t.match(registry.get('local')!.fingerprint, /^fp_[0-9a-f]{12}$/)
  t.not(registry.get('local')!.fingerprint, registry.get('absent')!.fingerprint)
  await registry.loadAll()
  t.ok(registry.ready(), 'unavailable models do not block readiness')
  await registry.close()
})

t.test('fromFile: an unreadable file is a clear error', async t => {
  await t.rejects(ModelRegistry.fromFile('/nonexistent/models.json', { config }), { name: 'ModelsFileError', message: /MODELS_FILE \/nonexistent\/models.json: cannot be read/ })
})

t.test('docs/configuration.md\'s models.json snippet is the shipped models/models.json', async t => {
  const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8')
  // The first JSON block that is a whole models file (later ones show single entries).
  const snippet = [...doc.matchAll(/```json\n([\s\S]*?)```/g)].map(m => m[1]).find(text => /^\s*\{\s*"models"\s*:/.test(text))
  t.ok(snippet, 'docs/configuration.md has a models.json snippet')
  t.same(JSON.parse(snippet!), JSON.parse(readFileSync(new URL('../../models/models.json', import.meta.url), 'utf8')))
})

t.test('the shipped models/models.json is valid', async t => {
  const registry = await ModelRegistry.fromFile(new URL('../../models/models.json', import.meta.url).pathname, { config, env: {} })
  t.ok(registry.list().length >= 2)
  // Without downloaded weights or UPSTREAM_* set, the models are listed as unavailable with a reason; nothing throws.
  t.equal(registry.state('upstream').state, 'unavailable')
  await registry.close()
})
