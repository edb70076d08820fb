// The command line of a script under scripts/: node:util's parseArgs, with `-h` or `--help`
// printing the script's usage and exiting 0, and an unknown or malformed option answered with
// what is wrong and the usage on stderr, exit 2, never a stack trace. The usage is the script's
// opening comment (what it measures and how to run it), so it is written once. An option whose
// default is a number (or numbers separated by commas) takes only such values: the scripts turn
// them into numbers, and a NaN would otherwise run the measurement with it.
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, type ParseArgsConfig } from 'node:util'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const NUMBER = /^\d+(\.\d+)?$/
const NUMBERS = /^\d+(\.\d+)?(,\d+(\.\d+)?)*$/

/** A file's leading `//` comment lines, without their slashes. */
export function openingComment (file: string): string {
  const lines: string[] = []
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('//')) break
    lines.push(line.replace(/^\/\/ ?/, ''))
  }
  return `${lines.join('\n').trim()}\n`
}

/** How a user runs the script: its npm script where package.json has one, else node and its path. */
export function commandOf (file: string): string {
  const relative = path.relative(ROOT, file)
  const scripts = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts
  const npmName = Object.keys(scripts).find(name => scripts[name] === `node ${relative}`)
  return npmName === undefined ? `node ${relative}` : `npm run ${npmName}`
}

/**
 * parseArgs(config) for the script at `scriptUrl` (its import.meta.url). `usage` replaces the
 * opening comment where a script writes its own. Options after a bare `--` are not looked at for
 * `--help` (a script may pass them on to another program).
 */
export function scriptArgs<C extends ParseArgsConfig> (scriptUrl: string, config: C, usage?: string): ReturnType<typeof parseArgs<C>> {
  const file = fileURLToPath(scriptUrl)
  const args = config.args ?? process.argv.slice(2)
  const dashes = args.indexOf('--')
  const own = dashes === -1 ? args : args.slice(0, dashes)
  if (own.includes('--help') || own.includes('-h')) {
    process.stdout.write(usage ?? openingComment(file))
    process.exit(0)
  }
  const refuse = (message: string): never => {
    process.stderr.write(`${commandOf(file)}: ${message}\n\n${usage ?? openingComment(file)}`)
    process.exit(2)
  }
  let parsed: ReturnType<typeof parseArgs<C>>
  try {
    parsed = parseArgs(config)
  } catch (err) {
    return refuse((err as Error).message)
  }
  const values = parsed.values as Record<string, unknown>
  for (const [name, option] of Object.entries(config.options ?? {})) {
    if (option.type !== 'string' || option.multiple === true || typeof option.default !== 'string' || !NUMBERS.test(option.default)) continue
    const list = option.default.includes(',')
    const value = values[name]
    if (typeof value === 'string' && !(list ? NUMBERS : NUMBER).test(value)) {
      refuse(`--${name} takes ${list ? 'numbers separated by commas' : 'a number'}, as its default ${option.default} (got ${JSON.stringify(value)})`)
    }
  }
  return parsed
}
