// Imports flow one way: HTTP (api/, dashboard/) -> limits/ and accounts/ ->
// prompt/ -> engine/, with store/ under accounts/ and limits/, and config.ts,
// errors.ts and the small neutral modules at the bottom. This test reads every
// import of src/ and fails on a cycle or on an import against that direction,
// so a shortcut taken in a hurry cannot come back unnoticed.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'

const SRC = path.join(REPO_ROOT, 'src')

/** Every .ts file under src/, as a path relative to src/ ("engine/registry.ts"), with the src files it imports. */
function importGraph (): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>()
  const files = (fs.readdirSync(SRC, { recursive: true }) as string[]).filter(f => f.endsWith('.ts'))
  for (const file of files) {
    const text = fs.readFileSync(path.join(SRC, file), 'utf8')
    const deps = new Set<string>()
    // Static imports and re-exports, bare imports for their effect (import './x.ts'), dynamic
    // import('...'), and workers started from new URL('...', import.meta.url).
    for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"`]*?from\s+'(\.[^']+)'|(?:^|\n)\s*import\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)|new URL\(\s*'(\.[^']+)'/g)) {
      const target = path.normalize(path.join(path.dirname(file), m[1] ?? m[2] ?? m[3] ?? m[4]))
      if (target.endsWith('.ts') && !target.startsWith('..')) deps.add(target)
    }
    graph.set(path.normalize(file), deps)
  }
  return graph
}

const graph = importGraph()

t.test('the graph is read: every module is found, and imports resolve to files', async t => {
  t.ok(graph.size > 100, `${graph.size} modules`)
  t.ok(graph.get('app.ts')?.has('api/chat/route.ts'), 'app.ts imports the chat route')
  t.ok(graph.get('engine/onnx/backend.ts')?.has('engine/onnx/worker.ts'), 'a worker started from new URL() counts as an import')
  for (const [file, deps] of graph) {
    for (const dep of deps) if (!graph.has(dep)) t.fail(`${file} imports ${dep}, which is not a file under src/`)
  }
})

t.test('no import cycles', async t => {
  // Tarjan's strongly connected components: any component of more than one module is a cycle.
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const cycles: string[][] = []
  const visit = (v: string): void => {
    index.set(v, counter)
    low.set(v, counter++)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!))
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        component.push(w)
      } while (w !== v)
      if (component.length > 1) cycles.push(component.sort())
    }
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  t.same(cycles, [], 'modules that import each other, directly or around a loop')
})

/** [the importing modules (a folder prefix or a file), the modules they must not import, why]. */
const RULES: Array<[string, string[], string]> = [
  ['engine/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'prompt/', 'search/', 'store/', 'pull/', 'convert/', 'app.ts', 'server.ts', 'cli.ts'],
    'the engine turns messages into tokens; it never knows who asked, over what, or how files got there'],
  ['prompt/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'store/', 'pull/'], 'prompt shaping sits between the HTTP layer and the engine'],
  ['search/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'store/', 'engine/upstream/', 'pull/'], 'web search is a service the prompt layer uses'],
  ['accounts/', ['api/', 'dashboard/', 'prompt/', 'engine/', 'pull/', 'limits/'], 'accounts are the domain under the HTTP layer (limits build on accounts, not the reverse)'],
  ['limits/', ['api/', 'dashboard/', 'prompt/', 'engine/', 'pull/'], 'limits sit under the HTTP layer'],
  ['store/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'prompt/', 'engine/', 'pull/'], 'the store is the bottom of the account side'],
  ['responses/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'prompt/', 'engine/', 'pull/'], 'stored responses sit on the store, under the doors that use them'],
  ['config.ts', ['api/', 'dashboard/', 'app.ts', 'server.ts'], 'settings are read by everything and read nothing above them'],
  ['api/', ['dashboard/', 'server.ts', 'cli.ts', 'pull/'], 'the API does not reach into the dashboard or the process entry points'],
  ['api/pipeline/', ['api/chat/', 'api/responses/', 'api/messages/'],
    'the pipeline takes chatd\'s own request (api/pipeline/request.ts) and names fields neutrally; the doors translate into it, never the reverse'],
  ['pull/', ['api/', 'dashboard/', 'app.ts', 'server.ts'], 'pull serves the engine (the server wraps the onnx factory with it); the registry never imports pull'],
  ['engine/registry.ts', ['pull/'], 'models.json is read by engine/models-file.ts for both, so the registry needs nothing from pull'],
  ['convert/', ['api/', 'dashboard/', 'accounts/', 'limits/', 'prompt/', 'search/', 'store/', 'pull/', 'engine/registry.ts', 'engine/onnx/scheduler/engine.ts'],
    'the converter is a build tool'],
  // The local engine's rooms (src/engine/onnx/): the scheduler uses them all; none uses the scheduler.
  ['engine/onnx/device/', ['engine/onnx/cache/', 'engine/onnx/grammar/', 'engine/onnx/text/', 'engine/onnx/sampling/', 'engine/onnx/scheduler/'],
    'the device runs graphs; it knows nothing of what the tokens mean, what is kept, or how rows are scheduled'],
  ['engine/onnx/cache/', ['engine/onnx/grammar/', 'engine/onnx/text/', 'engine/onnx/sampling/', 'engine/onnx/scheduler/'], 'caches hold positions of the device\'s tensors, nothing more'],
  ['engine/onnx/text/', ['engine/onnx/device/', 'engine/onnx/cache/', 'engine/onnx/grammar/', 'engine/onnx/sampling/', 'engine/onnx/scheduler/'], 'text in and out knows only the tokenizer and the template'],
  ['engine/onnx/sampling/', ['engine/onnx/device/', 'engine/onnx/cache/', 'engine/onnx/grammar/', 'engine/onnx/scheduler/'], 'sampling reads one row of logits'],
  ['engine/onnx/grammar/', ['engine/onnx/device/', 'engine/onnx/cache/', 'engine/onnx/sampling/', 'engine/onnx/scheduler/'], 'grammars see token bytes and masks, never the graph'],
]

t.test('no module imports against the direction', async t => {
  for (const [from, forbidden, why] of RULES) {
    const offending: string[] = []
    for (const [file, deps] of graph) {
      if (!(file === from || file.startsWith(from))) continue
      for (const dep of deps) if (forbidden.some(f => dep === f || dep.startsWith(f))) offending.push(`${file} -> ${dep}`)
    }
    t.same(offending, [], `${from}: ${why}`)
  }
})

t.test('the runtime never imports the converter; only chatd pull (a checkpoint source) and the CLI do', async t => {
  const importers = [...graph].filter(([file, deps]) => !file.startsWith('convert/') && [...deps].some(d => d.startsWith('convert/'))).map(([file]) => file).sort()
  // chatd pull's modules: the conversion itself, and which form it writes for which device.
  t.same(importers, ['cli.ts', 'pull/checkpoint.ts', 'pull/command.ts', 'pull/convert-worker.ts', 'pull/device-form.ts'])
})
