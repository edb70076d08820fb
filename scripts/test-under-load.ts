// Runs the test suite (or the given files) several times on a machine kept
// busy, to find the tests that pass only when the machine is idle: a
// busy-loop process on each core, tap's jobs doubled, and CI's settings
// (CI=true, CHATD_REQUIRE_SERVICES=1). Reports each run's failures by file,
// subtest and assertion, keeps each run's TAP output, and exits 1 when any run
// failed.
//
//   node scripts/test-under-load.ts [--runs 5] [--busy N] [--jobs N] [--out DIR] [files...] [-- tap options]

import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { scriptArgs } from './script-args.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const cores = os.availableParallelism()
/** A busy loop never outlives this, even if this script is killed before it can stop them. */
const BUSY_LIMIT_MS = 2 * 60 * 60 * 1000

const dashes = process.argv.indexOf('--')
const ownArgs = dashes === -1 ? process.argv.slice(2) : process.argv.slice(2, dashes)
const tapExtra = dashes === -1 ? [] : process.argv.slice(dashes + 1)
const { values, positionals: files } = scriptArgs(import.meta.url, {
  args: ownArgs,
  allowPositionals: true,
  options: {
    runs: { type: 'string', default: '5' },
    busy: { type: 'string', default: String(cores) },
    jobs: { type: 'string', default: String(2 * cores) },
    out: { type: 'string', default: path.join(ROOT, 'bench-out', 'under-load', new Date().toISOString().replace(/[:.]/g, '-')) },
  },
})

function count (name: string, value: string, min: number): number {
  const n = Number(value)
  if (!Number.isInteger(n) || n < min) {
    console.error(`--${name} must be a whole number of at least ${min} (got ${value})`)
    process.exit(2)
  }
  return n
}
const runs = count('runs', values.runs, 1)
const busy = count('busy', values.busy, 0)
const jobs = count('jobs', values.jobs, 1)
fs.mkdirSync(values.out, { recursive: true })

const children = new Set<ChildProcess>()
function stopAll (): void {
  for (const child of children) child.kill('SIGKILL')
  children.clear()
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    stopAll()
    process.exit(130)
  })
}

function startBusyLoops (): ChildProcess[] {
  return Array.from({ length: busy }, () => {
    const child = spawn(process.execPath, ['-e', `const end = Date.now() + ${BUSY_LIMIT_MS}; while (Date.now() < end) {}`], { stdio: 'ignore' })
    children.add(child)
    return child
  })
}

/** The failing tests of a TAP stream, innermost first found: "file > subtest > assertion". */
function failures (tap: string): string[] {
  const found: string[][] = []
  const names: string[] = []
  for (const line of tap.split('\n')) {
    const subtest = /^( *)# Subtest: (.*)$/.exec(line)
    if (subtest) {
      names.length = subtest[1].length / 4
      names.push(subtest[2])
      continue
    }
    const failed = /^( *)not ok \d+ - (.*?)(?: # time=[\d.]+m?s)?$/.exec(line)
    // A todo or skipped assertion is expected not to pass: not a failure.
    if (!failed || / # (TODO|SKIP)\b/i.test(failed[2])) continue
    const depth = failed[1].length / 4
    const where = [...names.slice(0, depth), failed[2]]
    const last = found.at(-1)
    // A subtest fails after the assertion inside it that failed: report only the innermost.
    if (last && last.length > where.length && where.every((name, i) => last[i] === name)) continue
    found.push(where)
  }
  return found.map(where => where.join(' > '))
}

function runTap (logFile: string): Promise<number> {
  const tap = fs.realpathSync(path.join(ROOT, 'node_modules', '.bin', 'tap'))
  const args = [tap, '--reporter=tap', `--jobs=${jobs}`, ...tapExtra, ...files]
  const env = {
    ...process.env,
    CI: 'true',
    CHATD_REQUIRE_SERVICES: '1',
    // tap starts each test file with the `node` it finds first: the project's own.
    PATH: `${path.join(ROOT, 'node_modules', '.bin')}${path.delimiter}${process.env.PATH ?? ''}`,
  }
  const log = fs.openSync(logFile, 'w')
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', log, log] })
  children.add(child)
  return new Promise(resolve => {
    child.once('exit', code => {
      children.delete(child)
      fs.closeSync(log)
      resolve(code ?? 1)
    })
  })
}

console.log(`${runs} run(s) of ${files.length > 0 ? files.join(' ') : 'the whole suite'}: ${busy} busy loop(s) on ${cores} core(s), tap --jobs=${jobs}, CI=true; TAP output in ${values.out}`)
const summary: Array<{ run: number; code: number; seconds: number; failed: string[] }> = []
for (let run = 1; run <= runs; run++) {
  const loops = startBusyLoops()
  const started = performance.now()
  const logFile = path.join(values.out, `run-${run}.tap`)
  const code = await runTap(logFile)
  for (const loop of loops) {
    loop.kill('SIGKILL')
    children.delete(loop)
  }
  const seconds = Math.round((performance.now() - started) / 1000)
  const failed = failures(fs.readFileSync(logFile, 'utf8'))
  summary.push({ run, code, seconds, failed })
  console.log(`run ${run}/${runs}: ${code === 0 ? 'passed' : `FAILED (exit ${code})`} in ${seconds} s`)
  for (const name of failed) console.log(`  not ok: ${name}`)
}

const bad = summary.filter(s => s.code !== 0)
console.log(`\n${runs - bad.length} of ${runs} run(s) passed under load.`)
const byTest = new Map<string, number>()
for (const s of bad) for (const name of new Set(s.failed)) byTest.set(name, (byTest.get(name) ?? 0) + 1)
for (const [name, times] of [...byTest].sort((a, b) => b[1] - a[1])) console.log(`  ${times}x ${name}`)
process.exit(bad.length > 0 ? 1 : 0)
