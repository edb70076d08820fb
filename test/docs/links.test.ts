// Every relative link in the repository's markdown (the root's files and
// docs/) must lead somewhere: the file or folder must exist, and a #fragment
// must name a heading of the markdown file it points into, by GitHub's
// heading ids. Links to other sites are not fetched.

import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import t from 'tap'

const ROOT = new URL('../..', import.meta.url).pathname

/**
 * A heading's id as GitHub makes it: lowercase, punctuation dropped (letters,
 * digits, `_`, `-` and spaces kept), every space a hyphen.
 */
function slug (heading: string): string {
  return heading.toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-')
}

/** The text of a line without its inline code spans, so `[a](b)` shown as code is no link. */
function withoutCode (line: string): string {
  return line.replace(/(`+)[\s\S]*?\1/g, '')
}

interface Markdown { headings: string[]; links: Array<{ line: number; target: string }> }

function parse (text: string): Markdown {
  const headings: string[] = []
  const links: Markdown['links'] = []
  const seen = new Map<string, number>()
  let fence: string | undefined
  text.split('\n').forEach((line, i) => {
    const marker = /^\s*(```|~~~)/.exec(line)?.[1]
    if (marker !== undefined && (fence === undefined || fence === marker)) {
      fence = fence === undefined ? marker : undefined
      return
    }
    if (fence !== undefined) return
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading) {
      const base = slug(heading[1])
      const n = seen.get(base) ?? 0
      seen.set(base, n + 1)
      headings.push(n === 0 ? base : `${base}-${n}`)
    }
    for (const m of withoutCode(line).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ line: i + 1, target: m[1] })
    }
  })
  return { headings, links }
}

const files = [
  ...readdirSync(ROOT).filter(f => f.endsWith('.md')),
  ...readdirSync(join(ROOT, 'docs')).filter(f => f.endsWith('.md')).map(f => `docs/${f}`),
]
const parsed = new Map(files.map(f => [f, parse(readFileSync(join(ROOT, f), 'utf8'))]))

t.test('the slug follows GitHub\'s heading ids', async t => {
  t.equal(slug('Quick start'), 'quick-start')
  t.equal(slug('Your first authenticated call'), 'your-first-authenticated-call')
  t.equal(slug('Prefix cache: the next turn reuses the last'), 'prefix-cache-the-next-turn-reuses-the-last')
  t.equal(slug('Usage records and GET /api/v1/usage'), 'usage-records-and-get-apiv1usage')
  t.equal(slug('models.json'), 'modelsjson')
  t.equal(slug('Upstream models ("backend": "openai")'), 'upstream-models-backend-openai')
  t.equal(slug('Without Docker: npm ci && npm start'), 'without-docker-npm-ci--npm-start')
  t.equal(slug('llama.cpp, measured in the same run'), 'llamacpp-measured-in-the-same-run')
  t.equal(slug('Several replicas: PostgreSQL and Redis'), 'several-replicas-postgresql-and-redis')
  t.same(parse('# A\n## A\n### `B` c\n```\n# not a heading\n```\n').headings, ['a', 'a-1', 'b-c'])
})

t.test('the docs this test reads are there', async t => {
  t.ok(files.includes('README.md'))
  t.ok(files.filter(f => f.startsWith('docs/')).length >= 8, 'docs/ holds the guides')
})

for (const [file, { links }] of parsed) {
  t.test(`${file}: every relative link resolves`, async t => {
    let checked = 0
    for (const { line, target } of links) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto: and the like
      checked++
      const hash = target.indexOf('#')
      const path = hash === -1 ? target : target.slice(0, hash)
      const fragment = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1))
      const resolved = path === '' ? file : relative(ROOT, join(ROOT, dirname(file), decodeURIComponent(path)))
      const where = `${file}:${line}: ${target}`
      if (!existsSync(join(ROOT, resolved))) {
        t.fail(`${where}: ${resolved} does not exist`)
        continue
      }
      if (fragment === undefined) continue
      if (!resolved.endsWith('.md')) {
        t.fail(`${where}: a #fragment on a file that is not markdown`)
        continue
      }
      const headings = parsed.get(resolved)?.headings ?? parse(readFileSync(join(ROOT, resolved), 'utf8')).headings
      if (!headings.includes(fragment)) t.fail(`${where}: ${resolved} has no heading #${fragment}`)
    }
    t.pass(`${checked} relative links checked`)
  })
}
