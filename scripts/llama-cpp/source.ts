// The llama.cpp source the comparison builds: the git bundle that the npm
// package node-llama-cpp ships (package/llama/gitRelease.bundle), so the only
// network the benchmark needs is the npm registry, and a pinned package
// version pins the exact llama.cpp commit. Cached under bench-out/.
import fs from 'node:fs'
import path from 'node:path'
import { exec, hasProgram, LlamaCppUnavailable } from './exec.ts'

/** Bump to compare with a newer llama.cpp; everything downstream (build, model) is keyed by the commit it brings. */
export const NODE_LLAMA_CPP_VERSION = '3.22.1'

export interface LlamaCppSource {
  dir: string
  /** node-llama-cpp's version, the pin. */
  npmVersion: string
  /** The llama.cpp release tag node-llama-cpp records for the bundle (llama/llama.cpp.info.json). */
  tag: string
  commit: string
}

const MARKER = '.chatd-source.json'

/** Clones the bundled llama.cpp into `<out>/llama.cpp-src` unless that clone is already there for this version. */
export function fetchLlamaCppSource (out: string, npmVersion = NODE_LLAMA_CPP_VERSION, log?: (line: string) => void): LlamaCppSource {
  const dir = path.join(out, 'llama.cpp-src')
  const cached = readMarker(dir)
  if (cached && cached.npmVersion === npmVersion && headOf(dir) === cached.commit) return { ...cached, dir }

  for (const program of ['npm', 'tar', 'git']) {
    if (!hasProgram(program)) throw new LlamaCppUnavailable(`\`${program}\` is not installed; it is needed to fetch llama.cpp's source`)
  }
  const packDir = path.join(out, 'llama.cpp-npm')
  fs.mkdirSync(packDir, { recursive: true })
  const tgz = path.join(packDir, `node-llama-cpp-${npmVersion}.tgz`)
  if (!fs.existsSync(tgz)) {
    log?.(`fetching node-llama-cpp@${npmVersion} from the npm registry (about 35 MB; it carries llama.cpp's source) ...`)
    exec('npm', ['pack', `node-llama-cpp@${npmVersion}`, '--pack-destination', packDir, '--silent'])
    if (!fs.existsSync(tgz)) throw new Error(`npm pack did not write ${tgz}`)
  }
  const unpacked = path.join(packDir, npmVersion)
  fs.rmSync(unpacked, { recursive: true, force: true })
  fs.mkdirSync(unpacked, { recursive: true })
  exec('tar', ['-xzf', tgz, '-C', unpacked, 'package/llama/gitRelease.bundle', 'package/llama/llama.cpp.info.json'])
  const bundle = path.join(unpacked, 'package/llama/gitRelease.bundle')
  const info = JSON.parse(fs.readFileSync(path.join(unpacked, 'package/llama/llama.cpp.info.json'), 'utf8')) as { tag?: unknown }
  if (typeof info.tag !== 'string' || info.tag === '') throw new Error(`node-llama-cpp@${npmVersion}: llama.cpp.info.json names no tag`)

  // The bundle carries one squashed commit (its HEAD): that commit is the tagged release.
  const heads = exec('git', ['bundle', 'list-heads', bundle]).stdout.trim().split('\n')
  const commit = heads[0]?.split(' ')[0] ?? ''
  if (!/^[0-9a-f]{40}$/.test(commit)) throw new Error(`${bundle}: no commit in \`git bundle list-heads\` (${heads.join('; ')})`)
  log?.(`cloning llama.cpp ${info.tag} (${commit.slice(0, 10)}) from the bundle into ${path.relative(process.cwd(), dir)} ...`)
  fs.rmSync(dir, { recursive: true, force: true })
  exec('git', ['clone', '--quiet', '--no-checkout', bundle, dir])
  exec('git', ['-c', 'advice.detachedHead=false', 'checkout', '--quiet', '--detach', commit], { cwd: dir })
  // A local tag, so `git describe` and llama.cpp's own build info name the release.
  exec('git', ['tag', '--force', info.tag, commit], { cwd: dir })
  fs.rmSync(unpacked, { recursive: true, force: true })

  const source = { npmVersion, tag: info.tag, commit }
  fs.writeFileSync(path.join(dir, MARKER), JSON.stringify(source, null, 2) + '\n')
  return { ...source, dir }
}

function readMarker (dir: string): Omit<LlamaCppSource, 'dir'> | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, MARKER), 'utf8'))
  } catch {
    return null
  }
}

function headOf (dir: string): string | null {
  try {
    return exec('git', ['rev-parse', 'HEAD'], { cwd: dir }).stdout.trim()
  } catch {
    return null
  }
}
