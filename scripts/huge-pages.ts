// Benchmarks run the way the Docker image runs chatd: with glibc's malloc
// asking for transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1).
// A decode step streams every weight once; with 4 KiB pages that is ~250,000
// TLB misses per step, with 2 MiB pages a few hundred. glibc reads the tunable
// only when a process starts, so a benchmark that lacks it runs itself again
// with it (children, the server and llama.cpp's tools included, inherit it).
import { spawnSync } from 'node:child_process'

export const HUGE_PAGES_TUNABLE = 'glibc.malloc.hugetlb=1'

/** Whether this process's malloc was started with the huge-page tunable. */
export function hugePagesOn (): boolean {
  return (process.env.GLIBC_TUNABLES ?? '').split(':').includes(HUGE_PAGES_TUNABLE)
}

/**
 * On Linux, when `wanted` and the tunable is missing, runs this script again
 * with it and exits with the child's status; otherwise returns.
 */
export function ensureHugePages (wanted: boolean): void {
  if (!wanted || process.platform !== 'linux' || hugePagesOn()) return
  const tunables = [process.env.GLIBC_TUNABLES, HUGE_PAGES_TUNABLE].filter(Boolean).join(':')
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, GLIBC_TUNABLES: tunables },
  })
  process.exit(child.status ?? 1)
}
