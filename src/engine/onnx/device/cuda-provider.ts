// onnxruntime-node's CUDA 12 execution provider: where its libraries go, and
// `chatd install-cuda`, which fetches them and fails loudly when it could not.
//
// The libraries are not in the npm package (too large); the package's own
// install script (script/install.js) downloads them from NuGet. Run as a
// command it decides by itself to do nothing, and exits 0 all the same, when:
// - ONNXRUNTIME_NODE_INSTALL or npm_config_onnxruntime_node_install is
//   `skip` (an .npmrc key becomes the latter under npm), or the _CUDA
//   variants are;
// - npm_config_local_prefix and npm_package_json name the same directory: it
//   takes that for a development install of onnxruntime-node itself. Every npm
//   script and every npx sets both, for the project's own package.json, which
//   is why `ONNXRUNTIME_NODE_INSTALL=cuda12 npx node .../install.js` did nothing.
// So the script runs with those variables removed, and afterwards every file
// it should have written is checked. Nothing here loads onnxruntime itself.

import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, normalize } from 'node:path'

/** The command that installs the provider, for messages. */
export const INSTALL_CUDA_COMMAND = 'npx chatd install-cuda'

/** Variables that make onnxruntime-node's install script skip its work; removed before it runs. */
export const SKIPPING_VARIABLES = [
  'ONNXRUNTIME_NODE_INSTALL',
  'ONNXRUNTIME_NODE_INSTALL_CUDA',
  'npm_config_onnxruntime_node_install',
  'npm_config_onnxruntime_node_install_cuda',
  'npm_config_local_prefix',
  'npm_package_json',
]

const require = createRequire(import.meta.url)

/** onnxruntime-node's package directory. */
export function ortPackageDir (): string {
  return join(dirname(require.resolve('onnxruntime-node')), '..')
}

/** Where the native binding and its provider libraries live for this platform. */
export function ortBindingDir (ortDir = ortPackageDir()): string {
  return join(ortDir, 'bin', 'napi-v6', process.platform, process.arch)
}

/** The CUDA execution provider library onnxruntime loads for `cuda`. */
export function cudaProviderPath (ortDir = ortPackageDir()): string {
  return join(ortBindingDir(ortDir), process.platform === 'win32' ? 'onnxruntime_providers_cuda.dll' : 'libonnxruntime_providers_cuda.so')
}

/** Whether onnxruntime-node's CUDA provider library is installed. */
export function cudaProviderInstalled (ortDir?: string): boolean {
  return existsSync(cudaProviderPath(ortDir))
}

/**
 * The files onnxruntime-node's install script writes for CUDA 12 on this
 * platform (its install-metadata.js); none where it publishes no CUDA build.
 */
export function cudaProviderFiles (ortDir = ortPackageDir()): string[] {
  const metadata = require(join(ortDir, 'script', 'install-metadata.js')) as { manifests: Record<string, Record<string, unknown>> }
  const manifest = metadata.manifests[`${process.platform}/${process.arch}:cuda12`]
  return manifest ? Object.keys(manifest).map(file => normalize(join(ortBindingDir(ortDir), file))) : []
}

/** The environment the install script runs in: `env` without the variables that make it skip. */
export function installerEnv (env: Record<string, string | undefined>): Record<string, string> {
  const clean: Record<string, string> = {}
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && !SKIPPING_VARIABLES.includes(name)) clean[name] = value
  }
  // Says what is wanted; on this platform it is also what the script does with no flag at all.
  clean.ONNXRUNTIME_NODE_INSTALL = 'cuda12'
  return clean
}

/** The provider could not be installed; the message says why and what is missing. */
export class CudaInstallError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'CudaInstallError'
  }
}

export interface InstallCudaOptions {
  /** onnxruntime-node's package directory (tests use a copy). */
  ortDir?: string
  env?: Record<string, string | undefined>
  /** The script's own output (download progress), line by line. */
  onOutput?: (line: string) => void
}

/** Runs onnxruntime-node's install script for CUDA 12; resolves with the files in place, or throws saying why not. */
export async function installCudaProvider (opts: InstallCudaOptions = {}): Promise<string[]> {
  const ortDir = opts.ortDir ?? ortPackageDir()
  const files = cudaProviderFiles(ortDir)
  if (files.length === 0) {
    throw new CudaInstallError(`onnxruntime-node publishes no CUDA provider for ${process.platform}/${process.arch}; the CUDA execution provider is available on Linux x64 only`)
  }
  const script = join(ortDir, 'script', 'install.js')
  const child = spawn(process.execPath, [script], { env: installerEnv(opts.env ?? process.env), stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const collect = (chunk: Buffer): void => {
    const text = chunk.toString('utf8')
    output += text
    for (const line of text.split('\n')) if (line.trim() !== '') opts.onOutput?.(line)
  }
  child.stdout.on('data', collect)
  child.stderr.on('data', collect)
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (exitCode, signal) => resolve(exitCode ?? (signal ? 128 : null)))
  })
  const missing = files.filter(file => !existsSync(file))
  if (code !== 0) {
    throw new CudaInstallError(`onnxruntime-node's install script (${script}) failed (exit ${code}): ${failureReason(output)}. ` +
      `Not installed: ${missing.join(', ')}. It downloads from api.nuget.org (through GLOBAL_AGENT_HTTPS_PROXY if set); run ${INSTALL_CUDA_COMMAND} again where that can be reached`)
  }
  if (missing.length > 0) {
    throw new CudaInstallError(`onnxruntime-node's install script (${script}) finished but did not install ${missing.join(', ')}`)
  }
  return files
}

/** The error lines of the script's output, without the stack frames and Node's own footer. */
function failureReason (output: string): string {
  const lines = output.split('\n').map(line => line.trim())
    .filter(line => line !== '' && !line.startsWith('at ') && !/^Node\.js v\d/.test(line) && !/triggerUncaughtException|^\^$|^node:internal/.test(line))
  const errors = lines.filter(line => /error/i.test(line))
  return (errors.length > 0 ? errors : lines).slice(-3).join(' ') || 'no output'
}
