// `npm ci` on a machine without a GPU (a laptop, CI, the CPU image) must not
// download onnxruntime-node's CUDA libraries, and must not make npm warn on
// every call. What onnxruntime-node's install script does (read from
// script/install.js and install-utils.js): with no setting, as a dependency's
// postinstall on Linux x64, it downloads the CUDA 12 provider from NuGet; with
// ONNXRUNTIME_NODE_INSTALL=skip (or npm_config_onnxruntime_node_install=skip,
// which an .npmrc key becomes, and which npm warns about as an unknown config)
// it exits at once. package.json's allowScripts (npm 11.16 and newer) denies
// the script outright, and the CI script and the Docker build also set the
// variable, which npm never reads. The script runs here from a copy, through a
// proxy on a loopback port nothing listens on: the network is never reached.

import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { cudaProviderPath } from '../../src/engine/onnx/cuda-provider.ts'
import { freePort } from '../helpers/chatd-process.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { ortCopy } from '../helpers/ort-copy.ts'

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { allowScripts?: Record<string, boolean> }
const linuxX64 = process.platform === 'linux' && process.arch === 'x64'

t.test('package.json denies onnxruntime-node\'s install script (npm\'s own allowScripts) and allows Node 24\'s', async t => {
  t.equal(pkg.allowScripts?.['onnxruntime-node'], false)
  t.equal(pkg.allowScripts?.node, true)
})

t.test('the CI script and the CPU image skip the script under any npm, by a variable npm does not read', async t => {
  const ci = readFileSync(join(REPO_ROOT, '.ci/run'), 'utf8')
  const skipAt = ci.indexOf('export ONNXRUNTIME_NODE_INSTALL=skip')
  t.ok(skipAt > 0 && skipAt < ci.indexOf('\nnpm ci'), '.ci/run sets it before npm ci')
  t.match(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'), /RUN ONNXRUNTIME_NODE_INSTALL=skip npm ci --omit=dev/)
})

const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' })
t.test('npm reads this project\'s configuration without an "Unknown project config" warning', { skip: npm.status !== 0 && 'npm is not on PATH' }, async t => {
  // A user configuration of its own, so only the project's settings are judged.
  const home = t.testdir({ '.npmrc': '' })
  const res = spawnSync('npm', ['config', 'get', 'allow-scripts'], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: home, npm_config_userconfig: join(home, '.npmrc'), npm_config_cache: join(home, 'cache') },
  })
  t.equal(res.status, 0, res.stderr)
  t.notMatch(res.stderr, /Unknown project config/, `npm ${npm.stdout.trim()}: no warning about the project's .npmrc`)
  t.notOk(existsSync(join(REPO_ROOT, '.npmrc')) && /onnxruntime/.test(readFileSync(join(REPO_ROOT, '.npmrc'), 'utf8')), 'no onnxruntime key in .npmrc')
})

t.test('install.js, run as npm runs a dependency\'s postinstall: with nothing set it downloads; with the variable it does not', { skip: !linuxX64 && 'onnxruntime-node downloads a CUDA provider on Linux x64 only' }, async t => {
  const dir = t.testdir({ project: {} })
  writeFileSync(join(dir, 'project', 'package.json'), '{}')
  const copy = ortCopy(join(dir, 'project'))
  const proxy = `http://127.0.0.1:${await freePort()}`
  // What npm sets for a dependency's install script: the project's prefix, the dependency's package.json.
  const asDependency = { PATH: process.env.PATH, GLOBAL_AGENT_HTTPS_PROXY: proxy, npm_config_local_prefix: join(dir, 'project'), npm_package_json: join(copy, 'package.json') }
  const script = join(copy, 'script', 'install.js')

  const unset = spawnSync(process.execPath, [script], { env: asDependency, encoding: 'utf8' })
  t.equal(unset.status, 1, 'nothing set: it tries to download (here it reaches only the refusing proxy)')
  t.match(unset.stderr, /ECONNREFUSED/)

  const skipped = spawnSync(process.execPath, [script], { env: { ...asDependency, ONNXRUNTIME_NODE_INSTALL: 'skip' }, encoding: 'utf8' })
  t.equal(skipped.status, 0, 'ONNXRUNTIME_NODE_INSTALL=skip: it exits at once, without a connection')
  t.equal(skipped.stderr, '')
  t.notOk(existsSync(cudaProviderPath(copy)))
})
