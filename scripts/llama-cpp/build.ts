// Builds the llama.cpp tools the comparison runs, as a user building
// llama.cpp for this CPU would: Release, -march=native (GGML_NATIVE), CPU
// backend only, no network code. Only these targets are compiled (the full
// tree takes several times longer), and the result is cached per commit.
//
// One exception to "as a user would": on CPUs with AMX, a native build
// compiles ggml's AMX matmul, which has been seen to crash (SIGSEGV in
// ggml_backend_amx_mul_mat) on a KVM guest that advertises AMX. The caller
// smoke-runs the native build and, when it dies by a signal, asks for the
// `no-amx` variant: the same build with AMX turned off and nothing else
// changed (AVX-512 and VNNI stay on). Either variant is reused from the cache.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { exec, hasProgram, LlamaCppUnavailable } from './exec.ts'
import type { LlamaCppSource } from './source.ts'

/** llama-server: the multi-turn scenario measures its prompt cache against chatd's. */
export const LLAMA_CPP_TOOLS = ['llama-bench', 'llama-batched-bench', 'llama-quantize', 'llama-server'] as const
export type LlamaCppTool = typeof LLAMA_CPP_TOOLS[number]

/** Part of the cache key: changing a flag rebuilds. */
export const CMAKE_FLAGS = [
  '-DCMAKE_BUILD_TYPE=Release',
  '-DGGML_NATIVE=ON',
  // CPU only, also on macOS where Metal and Accelerate would otherwise be on by default.
  '-DGGML_METAL=OFF',
  '-DGGML_BLAS=OFF',
  '-DGGML_CUDA=OFF',
  '-DGGML_VULKAN=OFF',
  // No downloads from the tools: curl (older releases) and OpenSSL-backed HTTPS (newer ones).
  '-DLLAMA_CURL=OFF',
  '-DLLAMA_OPENSSL=OFF',
  // Static tools: nothing to find at run time besides libc, libstdc++ and OpenMP.
  '-DBUILD_SHARED_LIBS=OFF',
  '-DLLAMA_BUILD_TESTS=OFF',
  '-DLLAMA_BUILD_EXAMPLES=OFF',
  '-DLLAMA_BUILD_SERVER=ON',
]

/**
 * native: the flags above. no-amx: the same, with the compiler told not to use AMX, so
 * ggml's AMX code is not compiled in (explicit -mno-* flags win over -march=native).
 */
export type LlamaCppVariant = 'native' | 'no-amx'
/** What a prepared build is: one of the CPU builds above, or node-llama-cpp's Vulkan libraries (vulkan.ts). */
export type LlamaCppBuildKind = LlamaCppVariant | 'vulkan'
const NO_AMX = '-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'
const VARIANT_FLAGS: Record<LlamaCppVariant, string[]> = {
  native: [],
  'no-amx': [`-DCMAKE_C_FLAGS=${NO_AMX}`, `-DCMAKE_CXX_FLAGS=${NO_AMX}`],
}

export interface LlamaCppBuild {
  binDir: string
  commit: string
  variant: LlamaCppBuildKind
  /** Seconds the build took; 0 when it came from the cache. */
  seconds: number
  cached: boolean
  bin: (tool: LlamaCppTool) => string
}

const MARKER = '.chatd-build.json'

/**
 * The tools, built or from the cache. Without `variant`, a cached build of either variant is
 * taken (a machine that needed no-amx once keeps it); with one, only that variant is.
 */
export function buildLlamaCpp (out: string, source: LlamaCppSource, opts: { jobs?: number; log?: (line: string) => void; variant?: LlamaCppVariant } = {}): LlamaCppBuild {
  const buildDir = path.join(out, 'llama.cpp-build')
  const binDir = path.join(buildDir, 'bin')
  const bin = (tool: LlamaCppTool): string => path.join(binDir, os.platform() === 'win32' ? `${tool}.exe` : tool)
  const keyOf = (variant: LlamaCppVariant) => ({ commit: source.commit, tag: source.tag, flags: [...CMAKE_FLAGS, ...VARIANT_FLAGS[variant]], tools: LLAMA_CPP_TOOLS })
  const result = (variant: LlamaCppVariant, seconds: number, cached: boolean): LlamaCppBuild => ({ binDir, commit: source.commit, variant, seconds, cached, bin })
  const marker = readJson(path.join(buildDir, MARKER))
  const acceptable: LlamaCppVariant[] = opts.variant ? [opts.variant] : ['native', 'no-amx']
  const cachedVariant = acceptable.find(v => sameKey(marker, keyOf(v)))
  if (cachedVariant && LLAMA_CPP_TOOLS.every(t => fs.existsSync(bin(t)))) return result(cachedVariant, 0, true)
  const variant = opts.variant ?? 'native'
  const key = keyOf(variant)

  if (!hasProgram('cmake')) throw new LlamaCppUnavailable('`cmake` is not installed; it is needed to build llama.cpp (apt-get install cmake g++)')
  if (!['c++', 'g++', 'clang++'].some(hasProgram)) throw new LlamaCppUnavailable('no C++ compiler (c++, g++ or clang++) is installed; it is needed to build llama.cpp (apt-get install g++)')

  const jobs = opts.jobs ?? 2
  const logFile = path.join(out, 'llama.cpp-build.log')
  fs.rmSync(buildDir, { recursive: true, force: true })
  fs.writeFileSync(logFile, `llama.cpp ${source.tag} (${source.commit})\n`)
  opts.log?.(`building ${LLAMA_CPP_TOOLS.join(', ')} from llama.cpp ${source.tag}${variant === 'native' ? '' : ` (${variant})`} with -j${jobs} (once per llama.cpp version; several minutes on 2 cores), log: ${path.relative(process.cwd(), logFile)} ...`)
  const started = performance.now()
  exec('cmake', ['-S', source.dir, '-B', buildDir, ...key.flags], { log: logFile })
  exec('cmake', ['--build', buildDir, '--config', 'Release', '-j', String(jobs), '--target', ...LLAMA_CPP_TOOLS], { log: logFile })
  const missing = LLAMA_CPP_TOOLS.filter(t => !fs.existsSync(bin(t)))
  if (missing.length > 0) throw new Error(`llama.cpp build finished without ${missing.join(', ')} in ${binDir} (log: ${logFile})`)
  const seconds = (performance.now() - started) / 1000
  fs.writeFileSync(path.join(buildDir, MARKER), JSON.stringify({ ...key, seconds: Math.round(seconds) }, null, 2) + '\n')
  return result(variant, seconds, false)
}

function readJson (file: string): Record<string, unknown> | null {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return null
  }
}

function sameKey (marker: Record<string, unknown> | null, key: Record<string, unknown>): boolean {
  if (!marker) return false
  return Object.entries(key).every(([k, v]) => JSON.stringify(marker[k]) === JSON.stringify(v))
}
