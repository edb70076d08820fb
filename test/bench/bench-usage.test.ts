// `npm run bench -- --help` prints the usage and exits 0; an unknown option
// says which, with the usage, exit 2; neither prints a stack trace nor
// starts measuring.

import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'

const bench = (...args: string[]) => spawnSync(process.execPath, [join(REPO_ROOT, 'scripts/bench.ts'), ...args], { cwd: REPO_ROOT, encoding: 'utf8' })

t.test('--help and -h print the usage', async t => {
  for (const flag of ['--help', '-h']) {
    const res = bench(flag)
    t.equal(res.status, 0, flag)
    t.match(res.stdout, /^Usage: npm run bench -- \[options\]\n/)
    t.match(res.stdout, /--no-llama-cpp/)
    t.equal(res.stderr, '')
  }
})

t.test('an unknown option: its name and the usage, exit 2, no stack trace', async t => {
  const res = bench('--bogus')
  t.equal(res.status, 2)
  t.match(res.stderr, /^npm run bench: Unknown option '--bogus'/)
  t.match(res.stderr, /Usage: npm run bench --/)
  t.notMatch(res.stderr, /\n\s+at /)
})

t.test('a device the benchmark does not know: said, with the usage, exit 2', async t => {
  const res = bench('--device', 'tpu')
  t.equal(res.status, 2)
  t.match(res.stderr, /^npm run bench: --device must be cpu, cuda or webgpu \(got tpu\)/)
  t.match(res.stderr, /--device cpu\|cuda\|webgpu/)
  t.notMatch(res.stderr, /\n\s+at /)
})
