import t from 'tap'
const x: number = 2
t.equal(x + 1, 3, 'adds')
