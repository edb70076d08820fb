// The reservation's guess of which leading parts of a prompt the account's
// prefix cache holds (src/limits/prompt-history.ts): the longest run of parts
// equal to the same key's last request that ran, and nothing for a request
// that never ran or another key.
import t from 'tap'
import { PromptHistory } from '../../src/limits/prompt-history.ts'

t.test('leading parts equal to the key\'s last request that ran count as cached; the first difference ends the run', async t => {
  const history = new PromptHistory()
  const first = history.guess('a', ['tools', 'system', 'hello'])
  t.equal(first.cachedChars, 0, 'nothing seen yet')
  first.remember()
  t.equal(history.guess('a', ['tools', 'system', 'hello', 'reply', 'next']).cachedChars, 'toolssystemhello'.length, 'the next turn repeats all three')
  t.equal(history.guess('a', ['tools', 'changed', 'hello']).cachedChars, 'tools'.length, 'a changed system message ends the run there')
  t.equal(history.guess('a', ['other tools', 'system', 'hello']).cachedChars, 0, 'different tools: nothing')
  t.equal(history.guess('b', ['tools', 'system', 'hello']).cachedChars, 0, 'another key (account, model, salt) guesses nothing')
})

t.test('a request that did not run (refused, failed before the engine) leaves the last one that did', async t => {
  const history = new PromptHistory()
  history.guess('a', ['x', 'y']).remember()
  history.guess('a', ['p', 'q']) // refused: never remembered
  t.equal(history.guess('a', ['x', 'y', 'z']).cachedChars, 2)
})
