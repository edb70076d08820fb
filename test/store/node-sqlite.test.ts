// The node:sqlite adapter (src/store/node-sqlite.ts) keeps prepared statements
// for reuse: the same text answers as a new statement would, the number kept
// is bounded, and iterators over the same text stay independent.

import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { NodeSqliteDatabase } from '../../src/store/node-sqlite.ts'

function openWithRows (t: Test): NodeSqliteDatabase {
  const db = new NodeSqliteDatabase(join(t.testdir(), 'kept.db'))
  t.teardown(() => db.close())
  db.prepare('CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT)').run([])
  for (let i = 1; i <= 5; i++) db.prepare('INSERT INTO things (name) VALUES (?)').run([`thing ${i}`])
  return db
}

t.test('a statement prepared again is reused and answers with its new parameters and the current rows', async t => {
  const db = openWithRows(t)
  const select = 'SELECT name FROM things WHERE id = ?'
  t.same(db.prepare(select).all([2]), [{ name: 'thing 2' }])
  const kept = db.statementsKept
  t.same(db.prepare(select).all([4]), [{ name: 'thing 4' }], 'new parameters')
  t.equal(db.statementsKept, kept, 'the same text was not prepared a second time')
  db.prepare('UPDATE things SET name = ? WHERE id = ?').run(['renamed', 4])
  t.same(db.prepare(select).all([4]), [{ name: 'renamed' }], 'what was written since')
  t.equal(db.prepare(select).reader, true)
  t.equal(db.prepare('DELETE FROM things WHERE id = ?').reader, false)
  t.equal(db.prepare('DELETE FROM things WHERE id = ?').run([5]).changes, 1)
  t.same(db.prepare('SELECT count(*) AS n FROM things').all([]), [{ n: 4 }])
})

t.test('the statements kept are bounded: texts that grow with a list do not pile up', async t => {
  const db = openWithRows(t)
  for (let n = 1; n <= 1000; n++) {
    const rows = db.prepare(`SELECT id FROM things WHERE id IN (${Array(n).fill('?').join(', ')})`).all(Array.from({ length: n }, (_, i) => i + 1))
    if (rows.length !== Math.min(n, 5)) t.fail(`${n} placeholders: ${rows.length} rows`)
  }
  t.ok(db.statementsKept <= 256, `${db.statementsKept} kept after 1,000 texts`)
  t.same(db.prepare('SELECT name FROM things WHERE id = ?').all([1]), [{ name: 'thing 1' }], 'a text evicted long ago is prepared again')
})

t.test('two iterators over the same text, read in turns, each see all their rows', async t => {
  const db = openWithRows(t)
  const select = 'SELECT id FROM things WHERE id >= ? ORDER BY id'
  const first = db.prepare(select).iterate([1])
  const second = db.prepare(select).iterate([3])
  const seen: Array<[unknown, unknown]> = []
  for (;;) {
    const a = first.next()
    const b = second.next()
    if (a.done === true && b.done === true) break
    seen.push([a.done === true ? null : (a.value as { id: number }).id, b.done === true ? null : (b.value as { id: number }).id])
  }
  t.same(seen, [[1, 3], [2, 4], [3, 5], [4, null], [5, null]])
  t.same(db.prepare(select).all([4]), [{ id: 4 }, { id: 5 }], 'and the kept statement still answers')
})
