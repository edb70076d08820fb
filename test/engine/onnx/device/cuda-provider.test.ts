// onnxruntime-node's CUDA provider without a GPU: what ONNX_DEVICE=cuda says
// when the library is missing, and `chatd install-cuda`: the variables that
// made onnxruntime-node's install script skip are removed, and a download that
// cannot happen fails loudly. The network is never reached: the install script
// goes through a proxy (global-agent's GLOBAL_AGENT_HTTPS_PROXY) on a loopback
// port nothing listens on, and runs from a copy of the package in a temp
// directory, so nothing could be written into node_modules anyway.

import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { run } from '../../../../src/cli.ts'
import { cudaProviderFiles, cudaProviderInstalled, cudaProviderPath, CudaInstallError, INSTALL_CUDA_COMMAND, installCudaProvider, installerEnv, SKIPPING_VARIABLES } from '../../../../src/engine/onnx/device/cuda-provider.ts'
import { createSession, cudaProviderMissingMessage } from '../../../../src/engine/onnx/device/providers.ts'
import { REPO_ROOT } from '../../../helpers/models.ts'
import { ortCopy } from '../../../helpers/ort-copy.ts'
import { REFUSED_URL } from '../../../helpers/refused.ts'

const linuxX64 = process.platform === 'linux' && process.arch === 'x64'
const installed = cudaProviderInstalled()

/** What npm sets for any npm script or npx in this project, plus every way of saying "skip". */
const NPM_LIKE = {
  npm_config_local_prefix: REPO_ROOT,
  npm_package_json: join(REPO_ROOT, 'package.json'),
  npm_config_onnxruntime_node_install: 'skip',
  ONNXRUNTIME_NODE_INSTALL: 'skip',
  ONNXRUNTIME_NODE_INSTALL_CUDA: 'skip',
}

t.test('the installer\'s environment: every variable that makes the script skip is removed', async t => {
  const env = installerEnv({ ...NPM_LIKE, npm_config_onnxruntime_node_install_cuda: 'skip', PATH: '/usr/bin', GLOBAL_AGENT_HTTPS_PROXY: 'http://proxy:3128' })
  for (const name of SKIPPING_VARIABLES.filter(n => n !== 'ONNXRUNTIME_NODE_INSTALL')) t.notOk(name in env, `${name} removed`)
  t.equal(env.ONNXRUNTIME_NODE_INSTALL, 'cuda12')
  t.equal(env.PATH, '/usr/bin', 'the rest is kept')
  t.equal(env.GLOBAL_AGENT_HTTPS_PROXY, 'http://proxy:3128', 'a proxy setting is kept')
})

t.test('the README\'s old command did nothing, silently; chatd install-cuda fails loudly when the download cannot happen', { skip: !linuxX64 && 'onnxruntime-node publishes its CUDA provider for Linux x64 only' }, async t => {
  const dir = t.testdir({})
  const copy = ortCopy(dir)
  const proxy = REFUSED_URL
  const library = cudaProviderPath(copy)
  t.match(cudaProviderFiles(copy), [library, /libonnxruntime_providers_shared\.so$/, /libonnxruntime_providers_tensorrt\.so$/])

  // `ONNXRUNTIME_NODE_INSTALL=cuda12 npx node node_modules/onnxruntime-node/script/install.js`: npx sets
  // npm_config_local_prefix and npm_package_json, and the script takes itself for a local install.
  const old = spawnSync(process.execPath, [join(copy, 'script', 'install.js')], {
    env: { PATH: process.env.PATH, GLOBAL_AGENT_HTTPS_PROXY: proxy, ONNXRUNTIME_NODE_INSTALL: 'cuda12', npm_config_local_prefix: REPO_ROOT, npm_package_json: join(REPO_ROOT, 'package.json') },
    encoding: 'utf8',
  })
  t.equal(old.status, 0, 'the script exits 0...')
  t.notOk(existsSync(library), '...having installed nothing')

  // The wrapper, under the same variables (and every "skip"), really tries, and says why it failed.
  const lines: string[] = []
  const err = await installCudaProvider({ ortDir: copy, env: { PATH: process.env.PATH, GLOBAL_AGENT_HTTPS_PROXY: proxy, ...NPM_LIKE }, onOutput: line => lines.push(line) }).catch((e: unknown) => e)
  t.ok(err instanceof CudaInstallError, String(err))
  t.match((err as Error).message, /^onnxruntime-node's install script \(.*install\.js\) failed \(exit 1\): .*ECONNREFUSED/)
  t.match((err as Error).message, `Not installed: ${library}`, 'names the library and where it belongs')
  t.match((err as Error).message, `run ${INSTALL_CUDA_COMMAND} again`)
  t.ok(lines.some(line => /ECONNREFUSED/.test(line)), 'the script\'s own output is passed on')
  t.notOk(existsSync(library))
})

t.test('`chatd install-cuda` exits 1 with the reason when it cannot download', { skip: (!linuxX64 && 'Linux x64 only') || (installed && 'the CUDA provider is installed here: the script has nothing to download') }, async t => {
  const saved = { ...process.env }
  t.teardown(() => {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name]
    Object.assign(process.env, saved)
  })
  Object.assign(process.env, NPM_LIKE, { GLOBAL_AGENT_HTTPS_PROXY: REFUSED_URL })
  let out = ''
  let err = ''
  const code = await run(['install-cuda'], line => { out += line + '\n' }, line => { err += line + '\n' })
  t.equal(code, 1)
  t.equal(out, '')
  t.match(err, /^chatd install-cuda: onnxruntime-node's install script .* failed \(exit 1\): .*ECONNREFUSED/)
  t.match(err, cudaProviderPath())
})

t.test('ONNX_DEVICE=cuda without the provider library: which file is missing where, and the command', { skip: installed && 'the CUDA provider is installed here' }, async t => {
  const message = cudaProviderMissingMessage()
  t.match(message, `onnxruntime-node's CUDA provider library is not installed: ${cudaProviderPath()} does not exist. Run ${INSTALL_CUDA_COMMAND}`)
  // Refused before any model is read.
  await t.rejects(createSession('/nonexistent/model.onnx', { device: 'cuda', threads: 1 }), { message })
})
