// scripts/gpu-check.sh's own mistakes are said plainly: no output folder (the
// usage, exit 2), an unknown option or step, and a carried folder that was never
// filled (which file is missing and the command that fills it), before anything
// is unpacked. The whole script is run end to end by hand (docs/performance.md).
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'

const SCRIPT = path.join(REPO_ROOT, 'scripts/gpu-check.sh')
const run = (args: string[], env: Record<string, string> = {}) => spawnSync('bash', [SCRIPT, ...args], { encoding: 'utf8', env: { ...process.env, ...env } })

t.test('usage mistakes: exit 2 and the usage', async t => {
  const none = run([])
  t.equal(none.status, 2)
  t.match(none.stderr, /^usage: scripts\/gpu-check\.sh OUT_DIR \[--small\]/)
  t.match(run(['--bogus']).stderr, /^usage:/, 'an option where the folder goes')
  const dir = t.testdir({})
  t.match(run([dir, '--fast']), { status: 2, stderr: /unknown option --fast/ })
  t.match(run([dir, '--step', 'later']), { status: 2, stderr: /--step takes setup, exactness, prepare, forms, capture, profile and bench, comma-separated, or all/ })
  t.match(run([dir, '--step', 'setup,later']), { status: 2, stderr: /--step takes/ }, 'each step is checked before any runs')
})

t.test('a carried folder never filled: which file, and how to fill it; nothing unpacked', async t => {
  const dir = t.testdir({ carry: {}, work: {}, out: {} })
  const res = run([path.join(dir, 'out'), '--step', 'setup'], { CHATD_GPU_CARRY: path.join(dir, 'carry'), CHATD_GPU_WORK: path.join(dir, 'work') })
  t.equal(res.status, 1)
  // Past the arguments everything goes through the log (gpu-check.log) to stdout.
  t.match(res.stdout + res.stderr, new RegExp(`${path.join(dir, 'carry')}/node\\.tar\\.xz is missing: run scripts/gpu-check\\.sh --pack where there is a network`))
  t.same(fs.readdirSync(path.join(dir, 'work')), ['xdg'], 'only the runtime folder was made')
  t.match(fs.readFileSync(path.join(dir, 'out', 'gpu-check.log'), 'utf8'), /node\.tar\.xz is missing/, 'and the log says it')
})
