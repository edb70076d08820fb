// chatd's command line: `chatd serve` and the account and key chores an
// operator scripts. Every command reads the same environment (and .env) as the
// server, so `chatd keys create` writes to the database the server reads.
//
//   chatd serve
//   chatd accounts create --email E [--tier T] [--admin]
//   chatd keys create --email E [--name N]     prints only the key
//   chatd keys list --email E
//   chatd keys revoke <prefix>
//   chatd pull [<model id>...]                 download local models' files (src/pull/)
//   chatd convert ...                          build an ONNX model directory (see --help)

import { parseArgs, type ParseArgsOptionsConfig } from 'node:util'
import { AccountError, Accounts } from './accounts/accounts.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { ModelsFileError } from './engine/registry.ts'
import { openMigratedDatabase, type Db } from './store/database.ts'

const USAGE = `Usage: chatd <command>

  serve                                          start the API server
  accounts create --email E [--tier T] [--admin] create an account
  keys create --email E [--name N]               create an API key; prints only the key
  keys list --email E                            list an account's keys (prefixes only)
  keys revoke <prefix>                           revoke a key by its sk-chatd-XXXXXX prefix
  pull [<model id>...] [--if-missing]            download local models' files from the Hugging Face Hub
                                                 (HF_ENDPOINT, HF_TOKEN); all of them when none is named;
                                                 --if-missing: skip complete ones without asking the hub
  convert --from DIR --out DIR [--dtype D]       build an ONNX model directory from a Llama/Qwen2
  convert --random CONFIG --out DIR [--seed N]   checkpoint, or seeded random weights (D: fp32, fp16, int4)

Settings come from environment variables (and .env); see .env.example.
`

/** Wrong command line: exit 2 with the usage text. */
class UsageError extends Error {
  readonly usage: string
  constructor (message: string, usage = USAGE) {
    super(message)
    this.usage = usage
  }
}

/** An expected failure (bad input file, nothing to revoke): exit 1 with the message, no stack. */
class CommandError extends Error {}

/** Opens the configured database for one command and closes it afterwards. */
async function withAccounts<T> (config: Config, fn: (accounts: Accounts) => Promise<T>): Promise<T> {
  const db: Db = await openMigratedDatabase(config.database)
  try {
    return await fn(new Accounts(db))
  } finally {
    await db.destroy()
  }
}

function parse (args: string[], options: ParseArgsOptionsConfig, positionals = 0) {
  try {
    const parsed = parseArgs({ args, options, allowPositionals: positionals > 0, strict: true })
    if (parsed.positionals.length > positionals) throw new UsageError(`unexpected argument: ${parsed.positionals[positionals]}`)
    return parsed
  } catch (err) {
    if (err instanceof UsageError) throw err
    throw new UsageError((err as Error).message)
  }
}

function required (value: unknown, flag: string): string {
  if (typeof value !== 'string' || value === '') throw new UsageError(`${flag} is required`)
  return value
}

type Out = (line: string) => void

const commands: Record<string, (args: string[], out: Out) => Promise<void>> = {
  async serve (args) {
    parse(args, {})
    const { main } = await import('./server.ts')
    await main()
  },

  async 'accounts create' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, tier: { type: 'string' }, admin: { type: 'boolean' } })
    const email = required(values.email, '--email')
    const account = await withAccounts(loadConfig(process.env, { dotenv: true }), accounts =>
      accounts.create({ email, tier: values.tier as string | undefined, isAdmin: values.admin === true }))
    out(`created account ${account.email} (tier ${account.tier}${account.isAdmin ? ', admin' : ''})`)
  },

  async 'keys create' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, name: { type: 'string' } })
    const email = required(values.email, '--email')
    const { key } = await withAccounts(loadConfig(process.env, { dotenv: true }), async accounts => {
      const account = await accounts.getByEmail(email)
      return accounts.createKey(account.id, { name: values.name as string | undefined })
    })
    // Only the key, so scripts can capture it: KEY=$(npx chatd keys create --email me@example.com)
    out(key)
  },

  async 'keys list' (args, out) {
    const { values } = parse(args, { email: { type: 'string' } })
    const email = required(values.email, '--email')
    const keys = await withAccounts(loadConfig(process.env, { dotenv: true }), async accounts =>
      accounts.listKeys((await accounts.getByEmail(email)).id))
    if (keys.length === 0) {
      out(`no keys for ${email}`)
      return
    }
    out(['PREFIX', 'NAME', 'CREATED', 'LAST USED', 'STATUS'].join('\t'))
    for (const k of keys) {
      out([k.prefix, k.name ?? '-', k.createdAt, k.lastUsedAt ?? 'never', k.revokedAt ? `revoked ${k.revokedAt}` : 'active'].join('\t'))
    }
  },

  async 'keys revoke' (args, out) {
    const { positionals } = parse(args, {}, 1)
    const prefix = required(positionals[0], '<prefix>')
    const revoked = await withAccounts(loadConfig(process.env, { dotenv: true }), accounts => accounts.revokeKey(prefix))
    if (!revoked) throw new AccountError(`no active key with prefix ${prefix}`)
    out(`revoked ${prefix}`)
  },

  async pull (args, out) {
    const { positionals, values } = parse(args, { 'if-missing': { type: 'boolean' } }, Infinity)
    const config = loadConfig(process.env, { dotenv: true })
    // The downloader lives in src/pull/; loaded on demand.
    const { runPullCommand } = await import('./pull/command.ts')
    const { PullError } = await import('./pull/errors.ts')
    // Ctrl-C stops the download cleanly: what arrived stays as .partial and the next pull resumes.
    const stop = new AbortController()
    const onSigint = (): void => stop.abort()
    process.once('SIGINT', onSigint)
    try {
      await runPullCommand(positionals, config, { out, tty: process.stderr.isTTY ? process.stderr : undefined, signal: stop.signal, ifMissing: values['if-missing'] === true })
    } catch (err) {
      if (err instanceof PullError) throw new CommandError(err.message, { cause: err })
      throw err
    } finally {
      process.off('SIGINT', onSigint)
    }
  },

  async convert (args, out) {
    // The model builder owns its flags (src/engine/onnx/convert/cli.ts); loaded on demand.
    const { runConvert, ConvertUsageError, CONVERT_USAGE } = await import('./engine/onnx/convert/cli.ts')
    try {
      const result = runConvert(args)
      out(`wrote ${result.onnxFile} in ${result.seconds.toFixed(1)} s`)
    } catch (err) {
      if (err instanceof ConvertUsageError) throw new UsageError(err.message, CONVERT_USAGE)
      throw new CommandError((err as Error).message, { cause: err })
    }
  },
}

/** Runs one command line; returns the exit code. */
export async function run (argv: string[], out: Out = line => { process.stdout.write(line + '\n') }, err: Out = line => { process.stderr.write(line + '\n') }): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    out(USAGE)
    return argv.length === 0 ? 1 : 0
  }
  const twoWord = `${argv[0]} ${argv[1] ?? ''}`
  const [name, rest] = commands[twoWord] ? [twoWord, argv.slice(2)] : [argv[0], argv.slice(1)]
  const command = commands[name]
  if (!command) {
    err(`chatd: unknown command: ${argv.slice(0, 2).join(' ')}\n\n${USAGE}`)
    return 2
  }
  try {
    await command(rest, out)
    return 0
  } catch (e) {
    if (e instanceof UsageError) {
      err(`chatd ${name}: ${e.message}\n\n${e.usage}`)
      return 2
    }
    if (e instanceof ConfigError || e instanceof AccountError || e instanceof ModelsFileError || e instanceof CommandError) {
      err(`chatd ${name}: ${e.message}`)
      return 1
    }
    throw e
  }
}

if (import.meta.main) {
  process.exitCode = await run(process.argv.slice(2))
}
