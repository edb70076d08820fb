// The WebGPU execution provider that onnxruntime-node carries in its own
// libonnxruntime (Dawn): on Linux it runs over Vulkan, on NVIDIA, AMD and Intel
// GPUs alike. What it needs from the machine, and whether this machine has a
// real GPU behind it.
//
// Dawn takes any Vulkan device, a software one too (Mesa's lavapipe, SwiftShader):
// right when asked for by name (the tests run on lavapipe), never for `auto`,
// where a CPU-speed "GPU" would be slower than the CPU provider. onnxruntime-node
// says nothing of the adapter it got, so `auto` asks in a child process, with the
// Vulkan loader told to leave the software drivers out (VK_LOADER_DRIVERS_DISABLE):
// if WebGPU still finds an adapter there, it is real hardware. In this process
// Dawn asks for the high-performance adapter, which is that GPU.
// (webgpu-probe.ts is the child; probe-model.ts its graph.)
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

/** Vulkan driver manifests (file names) of software renderers: Mesa's lavapipe and Google's SwiftShader. */
export const SOFTWARE_DRIVERS = ['*lvp*', '*swiftshader*']

/** How long the probe may take: a driver that hangs must not hold the model's start for ever. */
const PROBE_TIMEOUT_MS = 30_000

/** Device nodes that only a real GPU's kernel driver makes: NVIDIA's, the DRM render nodes (AMD, Intel, others), WSL's. */
export function gpuDeviceNodes (dev = '/dev'): string[] {
  const found: string[] = []
  const list = (dir: string): string[] => {
    try {
      return fs.readdirSync(dir)
    } catch {
      return []
    }
  }
  for (const name of list(dev)) if (/^nvidia\d+$/.test(name) || name === 'dxg') found.push(path.join(dev, name))
  for (const name of list(path.join(dev, 'dri'))) if (/^renderD\d+$/.test(name)) found.push(path.join(dev, 'dri', name))
  return found.sort()
}

/** Where the Vulkan loader (libvulkan.so.1) is: LD_LIBRARY_PATH, the dynamic linker's cache, the usual folders; null if nowhere. */
export function vulkanLoader (env: NodeJS.ProcessEnv = process.env): string | null {
  if (process.platform !== 'linux') return null
  const name = 'libvulkan.so.1'
  const dirs = [...(env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean)]
  for (const dir of dirs) if (fs.existsSync(path.join(dir, name))) return path.join(dir, name)
  try {
    // The cache holds the libraries' full paths as plain strings.
    const cache = fs.readFileSync('/etc/ld.so.cache').toString('latin1')
    const at = cache.indexOf(`/${name}\0`)
    if (at >= 0) return cache.slice(cache.lastIndexOf('\0', at) + 1, at + name.length + 1)
  } catch {}
  for (const dir of ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib', '/lib64', '/lib', '/usr/local/lib']) {
    if (fs.existsSync(path.join(dir, name))) return path.join(dir, name)
  }
  return null
}

/**
 * The Vulkan driver manifests (ICD files) the loader would read: those VK_DRIVER_FILES (or the
 * older VK_ICD_FILENAMES) names, or else the standard folders', plus VK_ADD_DRIVER_FILES.
 */
export function vulkanDriverFiles (env: NodeJS.ProcessEnv = process.env): string[] {
  const expand = (list: string | undefined): string[] => (list ?? '').split(':').filter(Boolean).flatMap(entry => {
    try {
      return fs.statSync(entry).isDirectory() ? fs.readdirSync(entry).filter(f => f.endsWith('.json')).map(f => path.join(entry, f)) : [entry]
    } catch {
      return []
    }
  })
  const explicit = env.VK_DRIVER_FILES ?? env.VK_ICD_FILENAMES
  if (explicit) return [...expand(explicit), ...expand(env.VK_ADD_DRIVER_FILES)]
  const config = [env.XDG_CONFIG_HOME ?? path.join(os.homedir(), '.config'), ...(env.XDG_CONFIG_DIRS ?? '/etc/xdg').split(':'), '/etc']
  const data = [env.XDG_DATA_HOME ?? path.join(os.homedir(), '.local/share'), ...(env.XDG_DATA_DIRS ?? '/usr/local/share:/usr/share').split(':')]
  const dirs = [...new Set([...config, ...data].filter(Boolean).map(d => path.join(d, 'vulkan', 'icd.d')))]
  return [...dirs.flatMap(d => expand(d)), ...expand(env.VK_ADD_DRIVER_FILES)]
}

/** Whether a driver manifest is a software renderer's (by its file name, as VK_LOADER_DRIVERS_DISABLE matches). */
export function isSoftwareDriver (file: string): boolean {
  const name = path.basename(file)
  return /lvp|swiftshader/i.test(name)
}

export interface AdapterProbe {
  /** WebGPU found an adapter with the software drivers left out: a real GPU. */
  gpu: boolean
  /** Why not, or what was seen; for the "model ready" line and errors. */
  reason: string
}

let probed: Promise<AdapterProbe> | null = null

/**
 * Whether WebGPU reaches a real GPU on this machine (asked once per process). On Linux, a machine
 * without a GPU's device node is answered at once; otherwise a child process opens a WebGPU session
 * on PROBE_MODEL with the software Vulkan drivers disabled.
 */
export function probeGpuAdapter (): Promise<AdapterProbe> {
  probed ??= probe()
  return probed
}

async function probe (): Promise<AdapterProbe> {
  if (process.platform === 'linux') {
    const nodes = gpuDeviceNodes()
    if (nodes.length === 0) return { gpu: false, reason: 'no GPU device on this machine (no /dev/nvidia*, /dev/dri/renderD* or /dev/dxg)' }
    if (!vulkanLoader()) return { gpu: false, reason: `a GPU device is there (${nodes.join(', ')}) but the Vulkan loader (libvulkan.so.1) is not installed` }
  }
  return probeInChild({ software: false })
}

/**
 * Opens a WebGPU session on PROBE_MODEL in a child process, with the software Vulkan drivers left
 * out unless `software` (the tests' check for lavapipe).
 */
export async function probeInChild (opts: { software: boolean }): Promise<AdapterProbe> {
  const disabled = [process.env.VK_LOADER_DRIVERS_DISABLE, ...(opts.software ? [] : SOFTWARE_DRIVERS)].filter(Boolean).join(',')
  const child = spawn(process.execPath, [fileURLToPath(new URL('./webgpu-probe.ts', import.meta.url))], {
    env: { ...process.env, ...(disabled ? { VK_LOADER_DRIVERS_DISABLE: disabled } : {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString('utf8') })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString('utf8') })
  const timer = setTimeout(() => child.kill('SIGKILL'), PROBE_TIMEOUT_MS)
  const code = await new Promise<number | null>(resolve => {
    child.once('error', () => resolve(null))
    child.once('close', exitCode => resolve(exitCode))
  })
  clearTimeout(timer)
  const what = opts.software ? 'WebGPU adapter' : 'WebGPU adapter on a real GPU'
  if (code === 0 && /^webgpu ok$/m.test(output)) return { gpu: true, reason: `a ${what}${opts.software ? '' : ' (Vulkan, software drivers left out)'}` }
  // The probe prints onnxruntime's message last; Dawn's and the loader's own lines come before it.
  const said = output.split('\n').map(l => l.trim()).filter(l => l !== '').at(-1)
  return { gpu: false, reason: `no ${what}${code === null ? ' (the probe did not finish)' : ''}: ${said?.replace(/^.*?(Failed to get a WebGPU adapter)/, '$1') ?? `the probe exited with code ${code}`}` }
}

/**
 * WebGPU asked for by name and not available: onnxruntime's own message, and what this machine
 * lacks of what Dawn needs (the Vulkan loader, a driver manifest, the GPU's device node).
 */
export function webgpuUnavailableMessage (err: Error, asked: string, otherDevices: string): string {
  const missing: string[] = []
  if (process.platform === 'linux') {
    if (!vulkanLoader()) {
      missing.push('the Vulkan loader (libvulkan.so.1) is not installed (Debian and Ubuntu: apt-get install libvulkan1; NVIDIA\'s driver also needs glvnd: libglvnd0 libegl1 libglx0)')
    }
    const drivers = vulkanDriverFiles()
    if (drivers.length === 0) {
      missing.push('no Vulkan driver manifest (ICD file) was found (NVIDIA: nvidia_icd.json, which the NVIDIA container runtime mounts when NVIDIA_DRIVER_CAPABILITIES includes graphics; AMD and Intel: Mesa\'s mesa-vulkan-drivers; VK_DRIVER_FILES names one elsewhere)')
    } else if (drivers.every(isSoftwareDriver)) {
      missing.push(`only software Vulkan drivers were found (${drivers.join(', ')})`)
    }
    if (gpuDeviceNodes().length === 0 && !drivers.some(isSoftwareDriver)) missing.push('no GPU device is visible (/dev/nvidia*, /dev/dri/renderD*)')
  }
  // onnxruntime's message starts with its source location and may end in a newline.
  const said = err.message.replace(/^.*?(Failed to get a WebGPU adapter)/s, '$1').split('\n')[0].trim()
  return `${asked} but onnxruntime's WebGPU execution provider could not start: ${said}` +
    `${missing.length > 0 ? `. On this machine ${missing.join('; ')}` : ''}. See docs/deployment.md (GPUs). ${otherDevices}`
}
