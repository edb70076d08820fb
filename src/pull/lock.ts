// One pull per model directory at a time: two processes appending to the same
// .partial file would corrupt it. The lock names its holder (pid and host); a
// lock left by a process that is gone (same host, pid not running), or by
// another host (another container: its pid means nothing here), is taken over.

import { hostname } from 'node:os'
import { readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { PullError } from './errors.ts'

const LOCK_FILE = '.chatd-pull.lock'

export function acquirePullLock (dir: string): () => void {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, LOCK_FILE)
  const me = JSON.stringify({ pid: process.pid, host: hostname() })
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, me, { flag: 'wx' })
      return () => { rmSync(file, { force: true }) }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const holder = readHolder(file)
      if (holder && holder.host === hostname() && holder.pid !== process.pid && isRunning(holder.pid)) {
        throw new PullError(`another chatd pull (pid ${holder.pid}) is downloading into ${dir}; wait for it to finish`)
      }
      rmSync(file, { force: true })
    }
  }
  throw new PullError(`could not lock ${file}`)
}

function readHolder (file: string): { pid: number; host: string } | undefined {
  try {
    return JSON.parse(readFileSync(file, 'utf8'))
  } catch {
    return undefined
  }
}

function isRunning (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
