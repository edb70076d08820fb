// Every script that reads its options through scripts/script-args.ts answers `--help` with its
// usage (exit 0) and an option it does not know with that option's name and the usage on stderr
// (exit 2), without a stack trace and without starting its work: what a user who types
// `npm run bench:engine -- --help` or misspells an option is owed.

import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import { commandOf, openingComment } from '../../scripts/script-args.ts'

const run = promisify(execFile)
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
// The scripts run without tap's coverage (its process hook reads this variable): one that prints
// its usage has loaded its imports and run none of them, which is no measure of their tests.
const CHILD_ENV = { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: '0' }

/** The scripts under scripts/ that parse their options with scriptArgs. */
function scriptsWithArgs (): string[] {
  const found: string[] = []
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(file)
      else if (entry.name.endsWith('.ts') && entry.name !== 'script-args.ts' && /\bscriptArgs\(import\.meta\.url/.test(fs.readFileSync(file, 'utf8'))) found.push(file)
    }
  }
  walk(path.join(REPO_ROOT, 'scripts'))
  return found.sort()
}

/** Exit code, stdout and stderr of the script run with `args`; never throws on a non-zero exit. */
async function answer (file: string, args: string[]): Promise<{ code: number, stdout: string, stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [file, ...args], { cwd: REPO_ROOT, env: CHILD_ENV, encoding: 'utf8', timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number, stdout?: string, stderr?: string }
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

const scripts = scriptsWithArgs()

t.test('the benchmark, load, soak and GPU scripts all read their options this way', async t => {
  const names = scripts.map(file => path.relative(REPO_ROOT, file))
  for (const expected of ['scripts/bench.ts', 'scripts/bench-engine.ts', 'scripts/load.ts', 'scripts/soak.ts', 'scripts/test-under-load.ts', 'scripts/bench/gpu-forms.ts']) {
    t.ok(names.includes(expected), expected)
  }
})

t.test('--help prints the usage and exits 0; an unknown option names itself with the usage, exit 2', async t => {
  // Two at a time: each is a Node process that loads the script's imports.
  const queue = [...scripts]
  const check = async (): Promise<void> => {
    for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
      const name = path.relative(REPO_ROOT, file)
      // bench.ts writes a usage of its own (its options are many); the others' is their opening comment.
      const help = await answer(file, ['--help'])
      t.equal(help.code, 0, `${name} --help: exit 0`)
      if (name === 'scripts/bench.ts') t.match(help.stdout, /^Usage: npm run bench -- \[options\]\n/, `${name} --help: its usage`)
      else t.equal(help.stdout, openingComment(file), `${name} --help: its opening comment`)
      t.ok(help.stdout.length > 40, `${name}: a usage that says something`)
      t.equal(help.stderr, '', `${name} --help: nothing on stderr`)

      const wrong = await answer(file, ['--bogus-option'])
      t.equal(wrong.code, 2, `${name} --bogus-option: exit 2`)
      t.ok(wrong.stderr.startsWith(`${commandOf(file)}: Unknown option '--bogus-option'`), `${name}: says which option, as its user runs it`)
      t.ok(wrong.stderr.includes(help.stdout), `${name}: the usage follows`)
      t.notMatch(wrong.stderr, /\n\s+at /, `${name}: no stack trace`)
      t.equal(wrong.stdout, '', `${name}: nothing started`)
    }
  }
  await Promise.all([check(), check()])
})

t.test('an option whose default is a number takes only numbers: the value is named, exit 2', async t => {
  const engine = path.join(REPO_ROOT, 'scripts/bench-engine.ts')
  const runs = await answer(engine, ['--runs', 'three'])
  t.equal(runs.code, 2)
  t.ok(runs.stderr.startsWith('npm run bench:engine: --runs takes a number, as its default 3 (got "three")'), runs.stderr.split('\n')[0])
  t.notMatch(runs.stderr, /\n\s+at /, 'no stack trace')

  const load = path.join(REPO_ROOT, 'scripts/load.ts')
  const list = await answer(path.join(REPO_ROOT, 'scripts/bench-llama.ts'), ['--concurrency', '1,two'])
  t.equal(list.code, 2)
  t.ok(list.stderr.startsWith('npm run bench:llama: --concurrency takes numbers separated by commas, as its default 1,2,4,8 (got "1,two")'), list.stderr.split('\n')[0])
  const negative = await answer(load, ['--duration=-5'])
  t.equal(negative.code, 2)
  t.ok(negative.stderr.startsWith('npm run load: --duration takes a number'), negative.stderr.split('\n')[0])
})
