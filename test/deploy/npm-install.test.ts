// `npm ci` on a machine without a GPU (a laptop, CI, the CPU image) must not
// download onnxruntime-node's CUDA libraries, on npm 10 as on npm 11. What
// onnxruntime-node's install script does (read from script/install.js and
// install-utils.js): with no setting, as a dependency's postinstall on Linux
// x64, it downloads the CUDA 12 provider from NuGet; with
// ONNXRUNTIME_NODE_INSTALL=skip or npm_config_onnxruntime_node_install=skip it
// exits at once. The project's .npmrc key `onnxruntime-node-install=skip` is
// what npm (10 and 11) hands every install script as the second; package.json's
// allowScripts (npm 11.16 and newer) also denies the script outright. The image
// has no .npmrc (.dockerignore is an allowlist), so the Dockerfile sets the
// variable. The script runs here from a copy, through a proxy on a loopback
// port nothing listens on: the network is never reached.

import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { cudaProviderPath } from '../../src/engine/onnx/device/cuda-provider.ts'
import { REPO_ROOT } from '../helpers/models.ts'
import { ortCopy } from '../helpers/ort-copy.ts'
import { REFUSED_URL } from '../helpers/refused.ts'

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { allowScripts?: Record<string, boolean> }
const linuxX64 = process.platform === 'linux' && process.arch === 'x64'

t.test('package.json denies onnxruntime-node\'s install script (npm\'s own allowScripts) and allows Node 24\'s', async t => {
  t.equal(pkg.allowScripts?.['onnxruntime-node'], false)
  t.equal(pkg.allowScripts?.node, true)
})

t.test('every locked package with an install script is named in allowScripts, allowed or denied', async t => {
  // npm 11.16 lists the ones that are not after every install, and npm 12 skips their scripts
  // unasked: each is decided here instead. Denied besides onnxruntime-node's: webgpu's (it removes
  // macOS's quarantine attribute from dawn.node) and protobufjs's (onnxruntime-web's copy; the
  // bundle chatd's GPU measurement loads carries its own).
  const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { hasInstallScript?: boolean }> }
  const withScripts = Object.entries(lock.packages).filter(([, p]) => p.hasInstallScript).map(([key]) => key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length))
  t.ok(withScripts.includes('onnxruntime-node'), 'the lockfile says which packages have install scripts')
  t.same(withScripts.filter(name => !(name in (pkg.allowScripts ?? {}))), [])
  t.equal(pkg.allowScripts?.webgpu, false)
})

t.test('CI installs a clone alone in its folder with npm 10 and runs the README\'s test command there; the CPU image skips the script by the variable', async t => {
  const ci = readFileSync(join(REPO_ROOT, '.ci/run'), 'utf8')
  const clone = ci.indexOf('git clone')
  const install = ci.indexOf('\nnpx -y npm@10 ci\n')
  t.ok(clone > 0 && install > clone && ci.indexOf('\nnpm test\n') > install, 'clone, then npm 10\'s npm ci, then npm test')
  t.match(ci, /cd "\$work\/chatd"/, 'both run in the clone')
  t.notMatch(ci, /ONNXRUNTIME_NODE_INSTALL/, 'nothing but the clone\'s own .npmrc skips the script')
  t.match(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'), /```sh\nnpm test\n```/)
  t.match(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'), /RUN ONNXRUNTIME_NODE_INSTALL=skip npm ci --omit=dev/)
})

const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' })
t.test('npm hands the project\'s .npmrc setting to the scripts it runs as npm_config_onnxruntime_node_install=skip', { skip: npm.status !== 0 && 'npm is not on PATH' }, async t => {
  t.match(readFileSync(join(REPO_ROOT, '.npmrc'), 'utf8'), /^onnxruntime-node-install=skip$/m)
  // A user configuration of its own, so only the project's settings are judged.
  const home = t.testdir({ '.npmrc': '' })
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: home, npm_config_userconfig: join(home, '.npmrc'), npm_config_cache: join(home, 'cache'), npm_config_update_notifier: 'false' }
  const res = spawnSync('npm', ['exec', '--offline', '-c', 'node -e "process.stdout.write(process.env.npm_config_onnxruntime_node_install)"'], { cwd: REPO_ROOT, encoding: 'utf8', env })
  t.equal(res.status, 0, res.stderr)
  t.equal(res.stdout, 'skip', `npm ${npm.stdout.trim()}`)
  // The key is unknown to npm itself, which warns about it on every command unless told not to.
  t.notMatch(res.stderr, /npm warn/i, 'no warning that reads like a failure')
})

t.test('install.js, run as npm runs a dependency\'s postinstall: with nothing set it downloads; with the variable it does not', { skip: !linuxX64 && 'onnxruntime-node downloads a CUDA provider on Linux x64 only' }, async t => {
  const dir = t.testdir({ project: {} })
  writeFileSync(join(dir, 'project', 'package.json'), '{}')
  const copy = ortCopy(join(dir, 'project'))
  const proxy = REFUSED_URL
  // What npm sets for a dependency's install script: the project's prefix, the dependency's package.json.
  const asDependency = { PATH: process.env.PATH, GLOBAL_AGENT_HTTPS_PROXY: proxy, npm_config_local_prefix: join(dir, 'project'), npm_package_json: join(copy, 'package.json') }
  const script = join(copy, 'script', 'install.js')

  const unset = spawnSync(process.execPath, [script], { env: asDependency, encoding: 'utf8' })
  t.equal(unset.status, 1, 'nothing set: it tries to download (here it reaches only the refusing proxy)')
  t.match(unset.stderr, /ECONNREFUSED/)

  const skipped = spawnSync(process.execPath, [script], { env: { ...asDependency, ONNXRUNTIME_NODE_INSTALL: 'skip' }, encoding: 'utf8' })
  t.equal(skipped.status, 0, 'ONNXRUNTIME_NODE_INSTALL=skip: it exits at once, without a connection')
  t.equal(skipped.stderr, '')

  const fromNpmrc = spawnSync(process.execPath, [script], { env: { ...asDependency, npm_config_onnxruntime_node_install: 'skip' }, encoding: 'utf8' })
  t.equal(fromNpmrc.status, 0, 'npm_config_onnxruntime_node_install=skip (the .npmrc key, as npm hands it on): it exits at once')
  t.equal(fromNpmrc.stderr, '')
  t.notOk(existsSync(cudaProviderPath(copy)))
})
