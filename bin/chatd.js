#!/usr/bin/env node
// Launcher for `npx chatd ...`. The sources are TypeScript run by Node 24's
// built-in type stripping; npx puts the project's Node 24 (the `node` dev
// dependency) first on PATH, which is why this runs through npx.
const [major] = process.versions.node.split('.').map(Number)
if (major < 24) {
  process.stderr.write(`chatd needs Node 24 or newer (this is ${process.version}); run it through npx or npm scripts, which use the project's Node 24.\n`)
  process.exit(1)
}
await import('../src/cli.ts').then(({ run }) => run(process.argv.slice(2))).then(code => { process.exitCode = code })
