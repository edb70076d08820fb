// The Dockerfile, checked without a Docker engine: hadolint where it is
// installed (Debian has no package for it), and always a structural check of
// what the image promises: multi-stage, a CUDA 12 + cuDNN runtime stage (the
// default) and a slim Node 24 `cpu` target, both running as a non-root user
// with a HEALTHCHECK on /healthz, models and data on volumes, the CUDA 12
// provider fetched only for the GPU build, and no secrets baked in.

import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'

const ROOT = new URL('../..', import.meta.url).pathname

interface Instruction { op: string; args: string; stage?: string }

/** Instructions in order, continuation lines joined, comments dropped, each tagged with its stage. */
function parseDockerfile (text: string): { args: Record<string, string>; stages: Array<{ name: string; from: string; body: Instruction[] }> } {
  const logical = text.replace(/\\\n/g, ' ').split('\n').map(l => l.trim()).filter(l => l && !l.startsWith('#'))
  const globalArgs: Record<string, string> = {}
  const stages: Array<{ name: string; from: string; body: Instruction[] }> = []
  for (const line of logical) {
    const [, op, args] = /^(\S+)\s+(.*)$/.exec(line) ?? []
    const upper = op.toUpperCase()
    if (upper === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args)!
      const from = m[1].replace(/\$\{(\w+)\}/g, (_, name: string) => globalArgs[name] ?? '')
      stages.push({ name: m[2] ?? String(stages.length), from, body: [] })
    } else if (stages.length === 0 && upper === 'ARG') {
      const [name, value] = args.split('=')
      globalArgs[name] = value ?? ''
    } else {
      stages.at(-1)!.body.push({ op: upper, args, stage: stages.at(-1)!.name })
    }
  }
  return { args: globalArgs, stages }
}

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
const { stages } = parseDockerfile(dockerfile)
const stage = (name: string) => {
  const s = stages.find(x => x.name === name)
  if (!s) throw new Error(`no stage ${name}`)
  return s
}

t.test('stages: dependencies apart from the runtime images; gpu is the default target', async t => {
  t.same(stages.map(s => s.name), ['deps', 'deps-cuda', 'app', 'cpu', 'node', 'gpu'])
  t.match(stage('cpu').from, /^node:24[\w.-]*-slim$/, 'cpu: a slim Node 24 image')
  t.match(stage('gpu').from, /^nvidia\/cuda:12\.[\d.]+-cudnn-runtime-/, 'gpu: an NVIDIA CUDA 12 runtime image with cuDNN')
  t.equal(stages.at(-1)!.name, 'gpu', 'a plain `docker build` gives the GPU image')
  t.ok(stage('gpu').body.some(i => i.op === 'COPY' && /--from=node \/usr\/local\/bin\/node/.test(i.args)), 'Node 24 copied into the CUDA image')
})

t.test('the GPU image carries what WebGPU needs: the Vulkan loader, glvnd, Mesa\'s GPU drivers without its software renderer, graphics from the NVIDIA runtime, a runtime dir', async t => {
  const run = stage('gpu').body.filter(i => i.op === 'RUN').map(i => i.args).join('\n')
  for (const pkg of ['libvulkan1', 'libglvnd0', 'libglx0', 'libegl1', 'libgl1', 'libopengl0', 'libgles2', 'mesa-vulkan-drivers']) t.match(run, new RegExp(`install [^\n]*\\b${pkg}\\b`), pkg)
  t.match(run, /rm -f \/usr\/share\/vulkan\/icd\.d\/lvp_icd\*\.json/, 'lavapipe\'s ICD removed')
  const env = stage('gpu').body.filter(i => i.op === 'ENV').map(i => i.args).join(' ')
  t.match(env, /NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics/)
  t.match(env, /XDG_RUNTIME_DIR=\/run\/chatd/)
  t.match(run, /chown chatd:chatd [^\n]*\/run\/chatd && chmod 700 \/run\/chatd/, 'the runtime dir is the user\'s')
})

t.test('onnxruntime-node\'s CUDA 12 libraries are fetched for the GPU image only', async t => {
  t.ok(stage('deps-cuda').body.some(i => i.op === 'RUN' && /ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules\/onnxruntime-node\/script\/install\.js/.test(i.args)))
  t.ok(stage('gpu').body.some(i => i.op === 'COPY' && /--from=deps-cuda \/app\/node_modules/.test(i.args)))
  t.ok(stage('cpu').body.some(i => i.op === 'COPY' && /--from=deps \/app\/node_modules/.test(i.args)))
  t.notMatch(stage('deps').body.map(i => i.args).join('\n'), /ONNXRUNTIME_NODE_INSTALL=cuda/)
  t.match(stage('deps').body.find(i => i.op === 'RUN')?.args, /^ONNXRUNTIME_NODE_INSTALL=skip npm ci --omit=dev/, 'the CPU image\'s install skips the CUDA download, whatever the npm')
  t.notOk(stage('deps').body.some(i => i.op === 'ENV' && /ONNXRUNTIME_NODE_INSTALL/.test(i.args)), 'only for that RUN: deps-cuda builds on this stage')
})

for (const name of ['cpu', 'gpu']) {
  t.test(`${name}: non-root, health-checked, volumes, serve`, async t => {
    const body = stage(name).body
    const users = body.filter(i => i.op === 'USER')
    t.equal(users.length, 1)
    t.notMatch(users[0].args, /^(root|0)(:|$)/, 'not root')
    const userAt = body.indexOf(users[0])
    t.ok(body.slice(userAt).every(i => i.op !== 'RUN'), 'nothing runs as root after USER')
    const health = body.find(i => i.op === 'HEALTHCHECK')
    t.match(health?.args, /CMD .*\/healthz/)
    t.match(body.find(i => i.op === 'VOLUME')?.args, /"\/models".*"\/data"/)
    const env = body.filter(i => i.op === 'ENV').map(i => i.args).join(' ')
    for (const setting of ['HOST=0.0.0.0', 'MODELS_DIR=/models', 'DATABASE_URL=sqlite:///data/chatd.db']) t.match(env, setting)
    // glibc reads it only at process start, so it must be in the image's environment.
    t.match(env, /GLIBC_TUNABLES=glibc\.malloc\.hugetlb=1/, 'malloc asks for transparent huge pages')
    t.match(body.find(i => i.op === 'ENTRYPOINT')?.args, /\["node", "bin\/chatd\.js"\]/)
    t.match(body.find(i => i.op === 'CMD')?.args, /\["serve"\]/)
  })
}

t.test('no secrets in the image', async t => {
  for (const s of stages) {
    for (const i of s.body.filter(x => x.op === 'ENV' || x.op === 'ARG')) {
      t.notMatch(i.args, /\b\w*(TOKEN|PASSWORD|SECRET|API_KEY|ADMIN_KEY)\w*=/, `${s.name}: ${i.op} ${i.args.slice(0, 40)}...`)
    }
    for (const i of s.body.filter(x => x.op === 'COPY')) t.notMatch(i.args, /\.env\b/)
  }
  const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').map(l => l.trim()).filter(l => l && !l.startsWith('#'))
  t.equal(ignore[0], '*', '.dockerignore is an allowlist')
  for (const allowed of ignore.slice(1)) {
    t.match(allowed, /^!/)
    t.notMatch(allowed, /\.env|node_modules|^!data|^!models\/?$|^!\.git/, `${allowed} lets nothing private in`)
  }
  t.ok(ignore.includes('!models/models.json'), 'models.json goes in, downloaded weights do not')
  for (const needed of ['package.json', 'package-lock.json', 'bin/chatd.js', 'src/cli.ts', 'models/models.json']) t.ok(existsSync(join(ROOT, needed)), `${needed} exists to be copied`)
  for (const copy of stages.flatMap(s => s.body.filter(i => i.op === 'COPY' && !i.args.startsWith('--from')))) {
    for (const source of copy.args.split(/\s+/).slice(0, -1)) if (source !== '.') t.ok(existsSync(join(ROOT, source)), `COPY ${source}: it exists`)
  }
})

const hadolint = spawnSync('hadolint', ['--version']).status === 0
t.test('hadolint', { skip: !hadolint && 'hadolint is not installed (Debian has no package for it); the structural checks above stand in for it' }, async t => {
  t.doesNotThrow(() => execFileSync('hadolint', ['--failure-threshold', 'error', join(ROOT, 'Dockerfile')]))
})

t.test('docker run --env-file with a copy of .env.example keeps the image\'s settings: reachable through -p, the database in /data', async t => {
  // docker's --env-file: a line is NAME=value unless empty or starting with #.
  const fromFile = Object.fromEntries(readFileSync(join(ROOT, '.env.example'), 'utf8').split('\n')
    .filter(line => line.trim() !== '' && !line.startsWith('#'))
    .map(line => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]))
  t.same(fromFile, {}, 'a copy sets nothing')
  for (const name of ['cpu', 'gpu']) {
    const body = stage(name).body
    const imageEnv = Object.fromEntries(body.filter(i => i.op === 'ENV').flatMap(i => i.args.split(/\s+/)).filter(Boolean).map(pair => pair.split('=', 2) as [string, string]))
    const env = { ...imageEnv, ...fromFile }
    t.equal(env.HOST, '0.0.0.0', `${name}: listens where -p reaches`)
    t.equal(env.DATABASE_URL, 'sqlite:///data/chatd.db', `${name}: the database under /data`)
    const owned = body.find(i => i.op === 'RUN' && /chown chatd:chatd \/models \/data/.test(i.args))
    t.ok(owned, `${name}: /data and /models belong to the image's user`)
    const user = body.find(i => i.op === 'USER')
    t.equal(user?.args, 'chatd')
  }
})
