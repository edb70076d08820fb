// llama.cpp's own server (llama-server) on the comparison model, for the
// multi-turn scenario: one slot, its prompt cache on (each /completion request
// sends cache_prompt: true, so the part of a new prompt that matches what the
// slot holds is not computed again), and time to first token read from its
// streamed reply.
import { spawn, type ChildProcess } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { createParser } from 'eventsource-parser'
import type { LlamaCppBuild } from './build.ts'
import { freePort } from '../../test/helpers/chatd-process.ts'

export interface LlamaServer {
  base: string
  /** Seconds from sending `prompt` (token ids) to the first streamed token; `gen` tokens are generated in all. */
  timeToFirstToken (prompt: number[], gen: number): Promise<number>
  stop (): Promise<void>
}

export async function startLlamaServer (build: LlamaCppBuild, model: string, opts: { threads: number; context: number }): Promise<LlamaServer> {
  const port = await freePort()
  const child: ChildProcess = spawn(build.bin('llama-server'), [
    '-m', model, '--host', '127.0.0.1', '--port', String(port),
    '-t', String(opts.threads), '-tb', String(opts.threads), '-c', String(opts.context), '-np', '1',
  ], { stdio: ['ignore', 'ignore', 'ignore'] })
  // A benchmark that dies must not leave the server running (it holds the model's memory).
  const kill = (): void => { child.kill('SIGTERM') }
  process.on('exit', kill)
  const base = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 300_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited with ${child.exitCode} while loading`)
    if (await fetch(`${base}/health`).then(r => r.ok, () => false)) break
    if (Date.now() > deadline) throw new Error('llama-server did not become ready in 5 minutes')
    await sleep(200)
  }
  return {
    base,
    async timeToFirstToken (prompt, gen) {
      const started = performance.now()
      const res = await fetch(`${base}/completion`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt, n_predict: gen, temperature: 0, cache_prompt: true, stream: true }),
      })
      if (!res.ok || !res.body) throw new Error(`llama-server answered ${res.status}`)
      let first: number | null = null
      const parser = createParser({ onEvent () { first ??= performance.now() } })
      const decoder = new TextDecoder()
      for await (const chunk of res.body) parser.feed(decoder.decode(chunk, { stream: true }))
      if (first === null) throw new Error('llama-server streamed nothing')
      return (first - started) / 1000
    },
    async stop () {
      process.off('exit', kill)
      child.kill('SIGTERM')
      if (child.exitCode === null) await new Promise(resolve => child.once('exit', resolve))
    },
  }
}
