// docs/development.md's map of the code names every folder of src/, so a
// newcomer's map is never older than the house: a folder added, moved or
// renamed without the map fails here. A folder is named as `src/<path>/` in
// the layout table, or, inside a named folder, as `<name>/` in that folder's row.
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import t from 'tap'
import { REPO_ROOT } from '../helpers/models.ts'

const doc = readFileSync(join(REPO_ROOT, 'docs/development.md'), 'utf8')
const table = doc.slice(doc.indexOf('## How the code is laid out'), doc.indexOf('### The import direction'))
const rows = table.split('\n').filter(line => line.startsWith('| `'))

function folders (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).filter(e => e.isDirectory()).flatMap(e => {
    const path = join(dir, e.name)
    return [relative(REPO_ROOT, path), ...folders(path)]
  })
}

t.test('every folder of src/ is on the map', async t => {
  const missing: string[] = []
  for (const folder of folders(join(REPO_ROOT, 'src'))) {
    if (rows.some(row => row.includes(`\`${folder}/\``))) continue
    // Named inside its parent's row (the engine's rooms, the dashboard's views).
    const parent = folder.slice(0, folder.lastIndexOf('/'))
    const name = folder.slice(folder.lastIndexOf('/') + 1)
    const parentRow = rows.find(row => row.startsWith(`| \`${parent}/\``) || row.includes(`, \`${parent}/\``))
    if (parentRow?.includes(`\`${name}/\``)) continue
    missing.push(folder)
  }
  t.same(missing, [], 'folders docs/development.md does not name')
})
