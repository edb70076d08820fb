// chatd's command line: `chatd serve` and the account and key chores an
// operator scripts. Every command reads the same environment (and .env) as the
// server, so `chatd keys create` writes to the database the server reads.
//
//   chatd serve
//   chatd accounts create --email E [--tier T] [--admin]
//   chatd accounts set-tier --email E --tier T
//   chatd accounts set-password --email E      reads the password from stdin
//   chatd accounts list
//   chatd accounts delete --email E --yes
//   chatd keys create --email E [--name N]     prints only the key
//   chatd keys list --email E
//   chatd keys revoke <key or prefix>
//   chatd pull [<model id>...]                 download local models' files (src/pull/)
//   chatd convert ...                          build an ONNX model directory (see --help)
//   chatd install-cuda                         download onnxruntime-node's CUDA 12 provider

import { parseArgs, type ParseArgsOptionsConfig } from 'node:util'
import { AccountError, Accounts } from './accounts/accounts.ts'
import { apiKeyPrefix } from './accounts/api-key-format.ts'
import { Tiers } from './accounts/tiers.ts'
import { ConfigError, loadConfig, type Config } from './config.ts'
import { ModelsFileError } from './engine/models-file.ts'
import { openMigratedDatabase, type Db } from './store/database.ts'
import { databaseOpenError } from './store/open-error.ts'

const USAGE = `Usage: chatd <command>

  serve                                          start the API server
  accounts create --email E [--tier T] [--admin] create an account (tier: one of TIERS_FILE's)
  accounts set-tier --email E --tier T           move an account to another tier
  accounts set-password --email E                set the dashboard password, read from stdin
  accounts list                                  list the accounts with their tiers
  accounts delete --email E --yes                delete an account with its keys, usage and stored responses
  keys create --email E [--name N]               create an API key; prints only the key
  keys list --email E                            list an account's keys (prefixes only)
  keys revoke <key or prefix>                    revoke a key: the whole key, or its sk-chatd-XXXXXX prefix
  pull [<model id>...] [--if-missing]            download local models' files from the Hugging Face Hub
       [--keep-checkpoint]                       (HF_ENDPOINT, HF_TOKEN); all of them when none is named;
                                                 --if-missing: skip complete ones without asking the hub;
                                                 a "checkpoint" source is converted here, and its download
                                                 removed afterwards unless --keep-checkpoint
  convert --from DIR --out DIR [--dtype D]       build an ONNX model directory from a Llama/Qwen2
  convert --random CONFIG --out DIR [--seed N]   checkpoint, or seeded random weights (D: fp32, fp16, int4, int8)
  install-cuda                                   download onnxruntime-node's CUDA 12 execution provider
                                                 (from api.nuget.org); fails unless it is then in place

Settings come from environment variables (and .env); see .env.example.
`

/**
 * One command's part of USAGE (or every command of a group, `keys`): its
 * line and the continuation lines under it.
 */
function usageOf (name: string): string | undefined {
  const entries: string[] = []
  for (const line of USAGE.split('\n')) {
    if (/^ {2}\S/.test(line)) entries.push(line)
    else if (/^ {3,}\S/.test(line) && entries.length > 0) entries[entries.length - 1] += '\n' + line
  }
  const mine = entries.filter(e => e.slice(2) === name || e.slice(2).startsWith(name + ' '))
  return mine.length === 0 ? undefined : `Usage: chatd ${name}\n\n${mine.join('\n')}\n\nSettings come from environment variables (and .env); see .env.example.\n`
}

const isHelp = (arg: string): boolean => arg === '--help' || arg === '-h'

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
  const db: Db = await openMigratedDatabase(config.database).catch(err => { throw databaseOpenError(config.database, err) })
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

/** The tier if TIERS_FILE defines it; otherwise a CommandError naming the ones it does. */
function knownTier (config: Config, tier: string): string {
  const tiers = Tiers.fromFile(config.tiersFile)
  if (!tiers.has(tier)) throw new CommandError(`no tier named ${tier} in ${config.tiersFile} (it has: ${tiers.names().join(', ')})`)
  return tier
}

async function readStdin (): Promise<string> {
  if (process.stdin.isTTY) process.stderr.write('Password (input is shown; pipe it in to hide it): ')
  let text = ''
  for await (const chunk of process.stdin) {
    text += chunk
    if (process.stdin.isTTY && text.includes('\n')) break
  }
  return text
}

const commands: Record<string, (args: string[], out: Out) => Promise<void>> = {
  async serve (args) {
    parse(args, {})
    const { main } = await import('./server.ts')
    await main()
  },

  async 'accounts create' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, tier: { type: 'string' }, admin: { type: 'boolean' } })
    const email = required(values.email, '--email')
    const config = loadConfig(process.env, { dotenv: true })
    const tier = values.tier === undefined ? undefined : knownTier(config, values.tier as string)
    const account = await withAccounts(config, accounts =>
      accounts.create({ email, tier, isAdmin: values.admin === true, operator: true }))
    out(`created account ${account.email} (tier ${account.tier}${account.isAdmin ? ', admin' : ''})`)
  },

  async 'accounts set-tier' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, tier: { type: 'string' } })
    const email = required(values.email, '--email')
    const config = loadConfig(process.env, { dotenv: true })
    const tier = knownTier(config, required(values.tier, '--tier'))
    const account = await withAccounts(config, async accounts => {
      const found = await accounts.getByEmail(email)
      await accounts.setTier(found.id, tier)
      return found
    })
    // Limits are read per request, so running servers apply the new tier from the next one.
    out(`${account.email}: tier ${account.tier} -> ${tier}`)
  },

  async 'accounts set-password' (args, out) {
    const { values } = parse(args, { email: { type: 'string' } })
    const email = required(values.email, '--email')
    // From stdin, never from an argument: arguments show in `ps` and shell history.
    const password = (await readStdin()).split(/\r?\n/)[0]
    await withAccounts(loadConfig(process.env, { dotenv: true }), async accounts => {
      await accounts.setPassword((await accounts.getByEmail(email)).id, password)
    })
    out(`password set for ${email}; log in at /api`)
  },

  async 'accounts delete' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, yes: { type: 'boolean' } })
    const email = required(values.email, '--email')
    const account = await withAccounts(loadConfig(process.env, { dotenv: true }), async accounts => {
      const found = await accounts.getByEmail(email)
      // Nothing is deleted on a command line that does not say so: the cascade cannot be undone.
      if (values.yes !== true) {
        throw new CommandError(`this would delete ${found.email}${found.isAdmin ? ' (an admin)' : ''} with its API keys, sessions, usage records and stored responses, for good; nothing was deleted. Run it again with --yes to do it`)
      }
      await accounts.delete(found.id)
      return found
    })
    // Running servers look keys up per request: the account's keys get 401 from the next one.
    out(`deleted ${account.email}${account.isAdmin ? ' (an admin; chatd accounts create --email E --admin makes another)' : ''}, with its keys, sessions, usage records and stored responses`)
  },

  async 'accounts list' (args, out) {
    parse(args, {})
    const all = await withAccounts(loadConfig(process.env, { dotenv: true }), accounts => accounts.list())
    out(['EMAIL', 'TIER', 'ROLE', 'CREATED'].join('\t'))
    for (const a of all) out([a.email, a.tier, a.isAdmin ? 'admin' : 'user', a.createdAt].join('\t'))
  },

  async 'keys create' (args, out) {
    const { values } = parse(args, { email: { type: 'string' }, name: { type: 'string' } })
    const email = required(values.email, '--email')
    const { key } = await withAccounts(loadConfig(process.env, { dotenv: true }), async accounts => {
      const account = await accounts.getByEmail(email)
      return accounts.createKey(account.id, { name: values.name as string | undefined })
    })
    // Only the key, so scripts can capture it: KEY=$(npx chatd keys create --email admin@localhost)
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
    // A whole key (as leaked) or its display prefix; the message never repeats a whole key.
    const given = required(positionals[0], '<key or prefix>').trim()
    const done = await withAccounts(loadConfig(process.env, { dotenv: true }), accounts => accounts.revokeByKeyOrPrefix(given))
    switch (done.outcome) {
      case 'revoked':
        out(`revoked ${done.prefix} (account ${done.email})`)
        return
      case 'already':
        out(`${done.prefix} (account ${done.email}) was already revoked (${done.revokedAt}); it authenticates nothing`)
        return
      default:
        if (done.by === 'prefix' && given.length > apiKeyPrefix(given).length) {
          throw new AccountError('that is neither a whole key (sk-chatd- and 32 letters or digits) nor a prefix (sk-chatd- and 6); nothing revoked')
        }
        throw new AccountError(done.by === 'key'
          ? `no key matches the key given (prefix ${apiKeyPrefix(given)}); nothing revoked`
          : `no key with prefix ${given}; nothing revoked (give the sk-chatd-XXXXXX prefix that keys list shows, or the whole key)`)
    }
  },

  async pull (args, out) {
    const { positionals, values } = parse(args, { 'if-missing': { type: 'boolean' }, 'keep-checkpoint': { type: 'boolean' } }, Infinity)
    const config = loadConfig(process.env, { dotenv: true })
    // The downloader lives in src/pull/; loaded on demand.
    const { runPullCommand } = await import('./pull/command.ts')
    const { PullError } = await import('./pull/errors.ts')
    // Ctrl-C stops the download cleanly: what arrived stays as .partial and the next pull resumes.
    const stop = new AbortController()
    const onSigint = (): void => stop.abort()
    process.once('SIGINT', onSigint)
    try {
      await runPullCommand(positionals, config, { out, tty: process.stderr.isTTY ? process.stderr : undefined, signal: stop.signal, ifMissing: values['if-missing'] === true, keepCheckpoint: values['keep-checkpoint'] === true })
    } catch (err) {
      if (err instanceof PullError) throw new CommandError(err.message, { cause: err })
      throw err
    } finally {
      process.off('SIGINT', onSigint)
    }
  },

  async 'install-cuda' (args, out) {
    parse(args, {})
    // Loaded on demand; it never loads onnxruntime itself.
    const { installCudaProvider, CudaInstallError } = await import('./engine/onnx/device/cuda-provider.ts')
    try {
      const files = await installCudaProvider({ onOutput: line => process.stderr.write(`onnxruntime-node: ${line}\n`) })
      for (const file of files) out(`installed ${file}`)
      out('The CUDA 12 runtime (cuBLAS included) and cuDNN 9 libraries and an NVIDIA driver are needed as well; ONNX_DEVICE=cuda says what is missing.')
    } catch (err) {
      if (err instanceof CudaInstallError) throw new CommandError(err.message, { cause: err })
      throw err
    }
  },

  async convert (args, out) {
    // The model builder owns its flags (src/convert/cli.ts); loaded on demand.
    const { runConvert, ConvertUsageError, CONVERT_USAGE } = await import('./convert/cli.ts')
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
  if (argv.length === 0) {
    // No command is a usage error like any other (exit 2), not a failure.
    err(`chatd: no command given\n\n${USAGE}`)
    return 2
  }
  if (isHelp(argv[0]) || argv[0] === 'help') {
    out(USAGE)
    return 0
  }
  const twoWord = `${argv[0]} ${argv[1] ?? ''}`
  const [name, rest] = commands[twoWord] ? [twoWord, argv.slice(2)] : [argv[0], argv.slice(1)]
  const command = commands[name]
  if (!command) {
    // `chatd keys --help`: the group's commands.
    const group = usageOf(argv[0])
    if (group && (argv[1] === undefined || isHelp(argv[1]))) {
      if (argv[1] === undefined) {
        err(`chatd ${argv[0]}: which ${argv[0]} command?\n\n${group}`)
        return 2
      }
      out(group)
      return 0
    }
    err(`chatd: unknown command: ${argv.slice(0, 2).join(' ')}\n\n${USAGE}`)
    return 2
  }
  // Every command prints its own help for --help (or -h) and succeeds, whatever else is given.
  if (rest.some(isHelp)) {
    if (name === 'convert') {
      const { CONVERT_USAGE } = await import('./convert/cli.ts')
      out(CONVERT_USAGE)
    } else {
      out(usageOf(name) ?? USAGE)
    }
    return 0
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
