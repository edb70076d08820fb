// The compose files: the base stack alone (CPU), with the GPU override, with
// the proxy override, and all three, must validate with `docker compose config`
// (no Docker engine needed), and the merged result must wire what the
// deployment relies on. Uses the compose v2 plugin, or docker-compose v1 where
// only that is installed; skips with a message where neither is.

import { execFile, execFileSync } from 'node:child_process'
import { copyFileSync, cpSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { parse } from 'yaml'

const ROOT = new URL('../..', import.meta.url).pathname
const exec = promisify(execFile)

function composeCommand (): string[] | undefined {
  for (const cmd of [['docker', 'compose'], ['docker-compose']]) {
    try {
      execFileSync(cmd[0], [...cmd.slice(1), 'version'], { stdio: 'ignore' })
      return cmd
    } catch {}
  }
  return undefined
}
const compose = composeCommand()

/** A copy of the compose files with a .env made from .env.example, as an operator would have it. */
function project (t: Test, extraEnv: string): string {
  const dir = t.testdir()
  for (const f of ['docker-compose.yml', 'docker-compose.gpu.yml', 'docker-compose.proxy.yml']) copyFileSync(join(ROOT, f), join(dir, f))
  cpSync(join(ROOT, 'deploy'), join(dir, 'deploy'), { recursive: true })
  writeFileSync(join(dir, '.env'), readFileSync(join(ROOT, '.env.example'), 'utf8') + extraEnv)
  return dir
}

/** Environment without the variables the compose files read, so the test sees only .env. */
const cleanEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(POSTGRES_PASSWORD|CHATD_|HF_|TRUST_PROXY|ONNX_DEVICE|COMPOSE_)/.test(k)))

async function config (dir: string, files: string[], profiles: string[] = []): Promise<any> {
  const args = [...compose!.slice(1), ...files.flatMap(f => ['-f', f]), ...profiles.flatMap(p => ['--profile', p]), 'config']
  const { stdout } = await exec(compose![0], args, { cwd: dir, env: cleanEnv })
  return parse(stdout)
}

const ENV = '\nPOSTGRES_PASSWORD=test-password\nCHATD_DOMAIN=chat.example.com\n'
const BASE = ['docker-compose.yml']
const GPU = ['docker-compose.yml', 'docker-compose.gpu.yml']
const PROXY = ['docker-compose.yml', 'docker-compose.proxy.yml']

t.test('compose files validate and wire the stack', { skip: !compose && 'neither `docker compose` nor `docker-compose` is installed: install Debian\'s docker-compose (.ci/run does)' }, async t => {
  const dir = project(t, ENV)

  t.test('base: chatd, postgres, redis and model-init on the CPU image', async t => {
    const { services, volumes } = await config(dir, BASE)
    // docker-compose v1 lists a profile's services too; only those without a profile start by default.
    t.same(Object.keys(services).filter(name => !services[name].profiles).sort(), ['chatd', 'model-init', 'postgres', 'redis'])
    t.match(services['model-init'], { command: ['pull', '--if-missing'], build: { target: 'cpu' } })
    t.ok(services['model-init'].volumes.some((v: unknown) => JSON.stringify(v).includes('/models')), 'model-init writes the models volume')
    t.match(services.chatd.depends_on, {
      'model-init': { condition: 'service_completed_successfully' },
      postgres: { condition: 'service_healthy' },
      redis: { condition: 'service_healthy' },
    })
    t.match(services.chatd.environment, { HOST: '0.0.0.0', MODELS_DIR: '/models', CHATD_AUTO_PULL: '0', ONNX_DEVICE: 'cpu', DATABASE_URL: 'postgres://chatd:test-password@postgres:5432/chatd', REDIS_URL: 'redis://redis:6379' })
    t.equal(services['model-init'].environment.ONNX_DEVICE, 'cpu', 'model-init pulls for the device chatd runs on')
    t.notOk(services.chatd.deploy, 'no GPU reservation in the base file')
    t.ok(services.postgres.healthcheck && services.redis.healthcheck)
    t.ok(volumes.models && volumes.data && volumes.postgres, 'models, data and the database on named volumes')
  })

  t.test('GPU override: the GPU image and an nvidia device reservation with graphics (Vulkan, for WebGPU) as well as compute', async t => {
    const { services } = await config(dir, GPU)
    t.match(services.chatd, { build: { target: 'gpu' }, image: 'chatd:gpu', environment: { ONNX_DEVICE: 'cuda' } })
    t.match(services.chatd.deploy.resources.reservations.devices, [{ driver: 'nvidia', capabilities: ['gpu', 'compute', 'utility', 'graphics'] }])
    t.match(services['model-init'], { image: 'chatd:gpu', environment: { ONNX_DEVICE: 'cuda' } }, 'one image and one device for both: the pull converts for the device chatd runs on')
  })

  t.test('proxy override: Caddy on 80/443 with the Caddyfile, chatd trusting one hop', async t => {
    const { services } = await config(dir, PROXY)
    const caddy = services.caddy
    t.match(caddy, { image: /^caddy:/, environment: { CHATD_DOMAIN: 'chat.example.com' } })
    t.ok(caddy.ports.some((p: any) => String(p.published ?? p).includes('443')), 'publishes 443')
    t.ok(caddy.volumes.some((v: unknown) => JSON.stringify(v).includes('/etc/caddy/Caddyfile')))
    t.equal(services.chatd.environment.TRUST_PROXY, '1')
  })

  t.test('the observability profile: Prometheus scraping chatd, Grafana with the dashboard, both on 127.0.0.1', async t => {
    const { services, volumes } = await config(dir, BASE, ['observability'])
    const { prometheus, grafana } = services
    t.same(prometheus.profiles, ['observability'])
    t.same(grafana.profiles, ['observability'])
    const mounts = (service: any): string => JSON.stringify(service.volumes)
    t.match(mounts(prometheus), /deploy\/prometheus\/prometheus\.yml.*\/etc\/prometheus\/prometheus\.yml/)
    t.match(mounts(grafana), /deploy\/grafana\/provisioning.*\/etc\/grafana\/provisioning/)
    t.match(mounts(grafana), /deploy\/grafana\/dashboards.*\/var\/lib\/grafana\/dashboards/)
    for (const service of [prometheus, grafana]) {
      t.ok(service.ports.every((p: any) => (p.host_ip ?? String(p).split(':')[0]) === '127.0.0.1'), 'published on 127.0.0.1 only')
    }
    t.ok(volumes.prometheus && volumes.grafana, 'their data on named volumes')
    const scrape = parse(readFileSync(join(ROOT, 'deploy/prometheus/prometheus.yml'), 'utf8'))
    t.same(scrape.scrape_configs[0].static_configs[0].targets, ['chatd:8080'], 'Prometheus scrapes the chatd service')
    const datasource = parse(readFileSync(join(ROOT, 'deploy/grafana/provisioning/datasources/prometheus.yml'), 'utf8'))
    t.equal(datasource.datasources[0].url, 'http://prometheus:9090', 'Grafana reads the Prometheus service')
    const dashboards = parse(readFileSync(join(ROOT, 'deploy/grafana/provisioning/dashboards/chatd.yml'), 'utf8'))
    t.equal(dashboards.providers[0].options.path, '/var/lib/grafana/dashboards', 'and loads the mounted dashboards')
  })

  t.test('all three together', async t => {
    const { services } = await config(dir, [...GPU, 'docker-compose.proxy.yml'])
    t.ok(services.caddy && services.chatd.deploy)
  })

  t.test('a missing secret stops compose with a message naming it', async t => {
    const bare = project(t, '\n')
    const err = await config(bare, BASE).catch((e: { stderr?: string }) => e)
    t.match(String((err as { stderr?: string }).stderr), /set POSTGRES_PASSWORD in \.env/)
  })
})

t.test('no secret values in the compose files', async t => {
  for (const f of ['docker-compose.yml', 'docker-compose.gpu.yml', 'docker-compose.proxy.yml']) {
    const doc = parse(readFileSync(join(ROOT, f), 'utf8'))
    for (const [name, service] of Object.entries<any>(doc.services ?? {})) {
      for (const [key, value] of Object.entries<any>(service.environment ?? {})) {
        if (/PASSWORD|TOKEN|SECRET|API_KEY|ADMIN_KEY/.test(key)) t.match(String(value), /^\$\{[A-Z_]+(:\?[^}]*)?\}$/, `${f} ${name}.${key} comes from .env`)
        else if (/:\/\/[^:/]+:[^@$]+@/.test(String(value))) t.fail(`${f} ${name}.${key} holds a literal password`)
      }
    }
  }
})

t.test('the proxy configurations keep /metrics from the public name', async t => {
  t.match(readFileSync(join(ROOT, 'deploy/Caddyfile'), 'utf8'), /^\s*respond \/metrics 404$/m)
  t.match(readFileSync(join(ROOT, 'deploy/nginx.conf'), 'utf8'), /location = \/metrics \{\s*return 404;\s*\}/)
})

t.test('the proxy configurations stream unbuffered', async t => {
  const caddy = readFileSync(join(ROOT, 'deploy/Caddyfile'), 'utf8')
  t.match(caddy, /reverse_proxy chatd:8080/)
  t.match(caddy, /flush_interval -1/)
  const nginx = readFileSync(join(ROOT, 'deploy/nginx.conf'), 'utf8')
  for (const directive of [/proxy_buffering off;/, /proxy_http_version 1\.1;/, /proxy_read_timeout \S+;/, /X-Forwarded-For \$proxy_add_x_forwarded_for;/]) t.match(nginx, directive)
})
