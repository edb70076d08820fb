// deploy/nginx.conf as an operator uses it: dropped into an nginx's http block
// (conf.d), with its certificate paths pointing at real files. `nginx -t`
// checks it on the nginx this machine has (Debian 12's 1.22 in CI, older than
// the 1.25.1 that introduced `http2 on;`). Skipped, saying why, without nginx.

import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'

const conf = readFileSync(join(REPO_ROOT, 'deploy/nginx.conf'), 'utf8')
const nginx = ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx'].find(path => existsSync(path))
const openssl = spawnSync('openssl', ['version']).status === 0

t.test('HTTP/2 is turned on in the form nginx before 1.25.1 accepts', async t => {
  t.match(conf, /^\s*listen 443 ssl http2;$/m)
  t.notMatch(conf, /^\s*http2 on;/m, 'the 1.25.1 directive only in a comment')
})

t.test('nginx -t accepts deploy/nginx.conf', { skip: (!nginx && 'nginx is not installed (apt-get install nginx-light)') || (!openssl && 'openssl is not installed (needed for a test certificate)') }, async t => {
  const dir = t.testdir()
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'privkey.pem'), '-out', join(dir, 'fullchain.pem'), '-days', '1', '-subj', '/CN=chat.example.com'], { encoding: 'utf8' })
  t.equal(made.status, 0, made.stderr)
  writeFileSync(join(dir, 'chatd.conf'), conf.replaceAll('/etc/letsencrypt/live/chat.example.com/', `${dir}/`))
  writeFileSync(join(dir, 'nginx.conf'), `pid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\nevents {}\nhttp {\n    include ${dir}/chatd.conf;\n}\n`)
  const res = spawnSync(nginx!, ['-t', '-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], { encoding: 'utf8' })
  t.equal(res.status, 0, res.stderr)
  t.match(res.stderr, /test is successful/)
  t.notMatch(res.stderr, /\[(emerg|warn)\]/, 'no errors and no warnings')
})
