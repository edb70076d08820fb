#!/usr/bin/env bash
# Installs Claude Code (@anthropic-ai/claude-code, pinned) for test/clients/claude-code.test.ts only:
# its native binary is ~400 MB, so it is never a dependency every `npm ci` downloads. It goes into a
# cache folder outside any clone (CHATD_CLAUDE_CODE_DIR, default ~/.cache/chatd/claude-code) and is
# kept there: a second run with the same version installs nothing. npm 11 holds back the package's
# postinstall (which puts the native binary in place of bin/claude.exe), so this runs it itself.
set -euo pipefail
version="2.1.332"
dir="${CHATD_CLAUDE_CODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/chatd/claude-code}"
bin="$dir/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "; then
  echo "Claude Code $version is installed in $dir"
  exit 0
fi
mkdir -p "$dir"
cd "$dir"
[ -f package.json ] || echo '{"name":"chatd-claude-code","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$version"
# The postinstall copies the platform's binary (an optional dependency) over the placeholder.
(cd node_modules/@anthropic-ai/claude-code && node install.cjs)
"$bin" --version
