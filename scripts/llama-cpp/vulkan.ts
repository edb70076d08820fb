// llama.cpp's Vulkan build for the GPU benchmark, as node-llama-cpp publishes it
// on npm: @node-llama-cpp/linux-x64-vulkan carries llama.cpp's libraries built
// with the Vulkan backend (libllama, libggml, libggml-vulkan, the CPU variants,
// libllama-common) but none of llama.cpp's tools. The tools the comparison runs
// (llama-bench, llama-batched-bench, llama-quantize) are compiled here from the
// same llama.cpp release's sources (the pinned node-llama-cpp's bundle,
// source.ts), against those libraries: only the tools' own two files each, so
// what computes is exactly the npm build. The result is cached in
// <out>/llama.cpp-vulkan/ (bin/: the tools beside the libraries, which they find
// through their RUNPATH); a machine without a network or a compiler (the GPU
// machine of scripts/gpu-check.sh) uses a copy prepared elsewhere.
import fs from 'node:fs'
import path from 'node:path'
import type { LlamaCppBuild } from './build.ts'
import { exec, hasProgram, LlamaCppUnavailable } from './exec.ts'
import { fetchLlamaCppSource, NODE_LLAMA_CPP_VERSION } from './source.ts'

/** The npm package with llama.cpp's Vulkan build for this platform. */
export const VULKAN_PACKAGE = '@node-llama-cpp/linux-x64-vulkan'
const TOOLS = { 'llama-bench': 'llama-bench', 'llama-batched-bench': 'batched-bench', 'llama-quantize': 'quantize' } as const
const MARKER = '.chatd-vulkan.json'

export interface VulkanBuild extends LlamaCppBuild {
  /** The npm package and version the libraries come from. */
  package: string
  /** The llama.cpp release its sources (the tools') are from. */
  tag: string
}

/** Where the prepared build lives under a benchmark output folder. */
export const vulkanDir = (out: string): string => path.join(out, 'llama.cpp-vulkan')

/** The tools and libraries, from the cache or prepared now (npm, tar, git and a C++ compiler needed then). */
export function prepareVulkanBuild (out: string, opts: { npmVersion?: string; log?: (line: string) => void } = {}): VulkanBuild {
  const npmVersion = opts.npmVersion ?? NODE_LLAMA_CPP_VERSION
  const dir = vulkanDir(out)
  const binDir = path.join(dir, 'bin')
  const bin = (tool: string): string => path.join(binDir, tool)
  const pkg = `${VULKAN_PACKAGE}@${npmVersion}`
  const marker = readJson(path.join(dir, MARKER))
  if (marker?.package === pkg && Object.keys(TOOLS).every(t => fs.existsSync(bin(t)))) {
    return { binDir, commit: String(marker.commit), tag: String(marker.tag), variant: 'vulkan', seconds: 0, cached: true, bin, package: pkg }
  }
  if (process.platform !== 'linux' || process.arch !== 'x64') throw new LlamaCppUnavailable(`${VULKAN_PACKAGE} is for Linux x64 only`)
  const compiler = ['g++', 'c++', 'clang++'].find(hasProgram)
  if (!compiler) throw new LlamaCppUnavailable('no C++ compiler (g++, c++ or clang++) to build llama.cpp\'s tools against its Vulkan libraries; prepare bench-out/llama.cpp-vulkan on a machine that has one (scripts/gpu-check.sh --pack)')
  const started = performance.now()
  const source = fetchLlamaCppSource(out, npmVersion, opts.log)
  // The libraries, from the npm package.
  const packDir = path.join(out, 'llama.cpp-npm')
  fs.mkdirSync(packDir, { recursive: true })
  const tgz = path.join(packDir, `node-llama-cpp-linux-x64-vulkan-${npmVersion}.tgz`)
  if (!fs.existsSync(tgz)) {
    opts.log?.(`fetching ${pkg} from the npm registry (about 24 MB: llama.cpp's Vulkan libraries) ...`)
    exec('npm', ['pack', pkg, '--pack-destination', packDir, '--silent'])
    if (!fs.existsSync(tgz)) throw new Error(`npm pack did not write ${tgz}`)
  }
  fs.rmSync(dir, { recursive: true, force: true })
  fs.mkdirSync(binDir, { recursive: true })
  exec('tar', ['-xzf', tgz, '-C', binDir, '--strip-components=3', 'package/bins/linux-x64-vulkan'])
  const libs = fs.readdirSync(binDir)
  const lib = (pattern: RegExp): string => {
    const found = libs.find(f => pattern.test(f))
    if (!found) throw new Error(`${tgz}: no library matching ${pattern} (has ${libs.join(', ')})`)
    return found
  }
  const link = ['libllama-common.so', lib(/^libllama\.vulkan\..*\.so$/), lib(/^libggml\.vulkan\..*\.so$/), 'libggml-base.so'].map(l => `-l:${l}`)
  // The tools: each tool's two files against the package's libraries, found beside the tool at run time.
  const log = path.join(out, 'llama.cpp-vulkan-build.log')
  fs.writeFileSync(log, `${pkg}, llama.cpp ${source.tag} (${source.commit})\n`)
  opts.log?.(`compiling ${Object.keys(TOOLS).join(', ')} from llama.cpp ${source.tag} against ${pkg}'s libraries (about a minute), log: ${path.relative(process.cwd(), log)} ...`)
  for (const [tool, folder] of Object.entries(TOOLS)) {
    const files = ['main.cpp', fs.readdirSync(path.join(source.dir, 'tools', folder)).find(f => f.endsWith('.cpp') && f !== 'main.cpp') as string]
    exec(compiler, [
      '-std=c++17', '-O2', '-DNDEBUG',
      ...['include', 'ggml/include', 'common', 'vendor'].flatMap(d => ['-I', path.join(source.dir, d)]),
      ...files.map(f => path.join(source.dir, 'tools', folder, f)),
      '-L', binDir, ...link, '-Wl,-rpath,$ORIGIN', '-pthread', '-o', bin(tool),
    ], { log })
  }
  const seconds = (performance.now() - started) / 1000
  fs.writeFileSync(path.join(dir, MARKER), JSON.stringify({ package: pkg, commit: source.commit, tag: source.tag, seconds: Math.round(seconds) }, null, 2) + '\n')
  return { binDir, commit: source.commit, tag: source.tag, variant: 'vulkan', seconds, cached: false, bin, package: pkg }
}

function readJson (file: string): Record<string, unknown> | null {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return null
  }
}
