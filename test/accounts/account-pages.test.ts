// The admin page's list of accounts, a page at a time, found by part of the email,
// on both databases: LIKE's wildcards in the search are taken literally, and the
// search is compared as emails are stored (NFKC, lower case).

import t from 'tap'
import { Accounts } from '../../src/accounts/accounts.ts'
import { onEachDatabase } from '../helpers/databases.ts'

onEachDatabase(t, 'a page of accounts in the order they were made, and how many match', async (t, db) => {
  const accounts = new Accounts(db)
  for (let i = 0; i < 12; i++) await accounts.create({ email: `user${String(i).padStart(2, '0')}@example.com` })
  await accounts.create({ email: 'ann_lee@example.org' })
  await accounts.create({ email: 'annxlee@example.org' })
  await accounts.create({ email: '100%@example.org' })

  const first = await accounts.listPage({ offset: 0, limit: 5 })
  t.same(first.accounts.map(a => a.email), ['user00@example.com', 'user01@example.com', 'user02@example.com', 'user03@example.com', 'user04@example.com'])
  t.equal(first.total, 15)
  t.same((await accounts.listPage({ offset: 10, limit: 5 })).accounts.map(a => a.email), ['user10@example.com', 'user11@example.com', 'ann_lee@example.org', 'annxlee@example.org', '100%@example.org'])
  t.same(await accounts.listPage({ offset: 100, limit: 5 }), { accounts: [], total: 15 }, 'past the end: none, and the count')

  const found = async (emailHas: string) => (await accounts.listPage({ offset: 0, limit: 50, emailHas })).accounts.map(a => a.email)
  t.same(await found('ann_'), ['ann_lee@example.org'], '_ is a character, not any character')
  t.same(await found('0%'), ['100%@example.org'], '% is a character, not any text')
  t.same(await found('\\'), [], 'a backslash finds nothing, and breaks nothing')
  t.same(await found('EXAMPLE.ORG'), ['ann_lee@example.org', 'annxlee@example.org', '100%@example.org'], 'compared in lower case')
  t.same(await found('ｕｓｅｒ１１'), ['user11@example.com'], 'full-width letters read as the plain ones, as emails are stored')
  t.equal((await accounts.listPage({ offset: 0, limit: 2, emailHas: 'user' })).total, 12)
})
