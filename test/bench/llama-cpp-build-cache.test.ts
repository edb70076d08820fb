// The llama.cpp comparison build is cached per commit, flags and variant: a
// machine whose native build had to be redone without AMX keeps that build
// on later runs, and a caller that asks for one variant never gets the other.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { buildLlamaCpp, CMAKE_FLAGS, LLAMA_CPP_TOOLS } from '../../scripts/llama-cpp/build.ts'

const source = { dir: '/nonexistent', npmVersion: '0.0.0', tag: 'b1', commit: 'c0ffee' }
const NO_AMX = '-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'

/** An output folder holding a finished build whose marker lists `flags`. */
function cachedBuild (t: Test, flags: string[]): string {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'chatd-llama-build-'))
  t.teardown(() => fs.rmSync(out, { recursive: true, force: true }))
  const bin = path.join(out, 'llama.cpp-build', 'bin')
  fs.mkdirSync(bin, { recursive: true })
  for (const tool of LLAMA_CPP_TOOLS) fs.writeFileSync(path.join(bin, tool), '')
  fs.writeFileSync(path.join(out, 'llama.cpp-build', '.chatd-build.json'),
    JSON.stringify({ commit: source.commit, tag: source.tag, flags, tools: LLAMA_CPP_TOOLS }))
  return out
}

t.test('a cached native build is reused as native', async t => {
  const build = buildLlamaCpp(cachedBuild(t, CMAKE_FLAGS), source)
  t.equal(build.cached, true)
  t.equal(build.variant, 'native')
})

t.test('a cached no-amx build is reused when no variant is asked for', async t => {
  const build = buildLlamaCpp(cachedBuild(t, [...CMAKE_FLAGS, `-DCMAKE_C_FLAGS=${NO_AMX}`, `-DCMAKE_CXX_FLAGS=${NO_AMX}`]), source)
  t.equal(build.cached, true)
  t.equal(build.variant, 'no-amx')
})

t.test('asking for no-amx does not take a cached native build', async t => {
  // Not cached, so it builds: from a source folder that does not exist, which fails before any compiler runs.
  const out = cachedBuild(t, CMAKE_FLAGS)
  t.throws(() => buildLlamaCpp(out, source, { variant: 'no-amx' }))
})

t.test('a marker for another commit is not reused', async t => {
  const out = cachedBuild(t, CMAKE_FLAGS)
  t.throws(() => buildLlamaCpp(out, { ...source, commit: 'beef' }))
})
