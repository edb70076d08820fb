// The gate of every test that drives an agent's own binary (the Codex CLI, Claude Code): the pinned
// version scripts/agents.ts installs is there, or the test skips saying how to install it, except
// under CHATD_REQUIRE_SERVICES=1 (CI, which installs them first), where a missing agent is a
// failure, so a CI run can never pass by skipping them.

import type { Test } from 'tap'
import { installedAgent, type Agent } from '../../scripts/agents.ts'

/**
 * The command that runs the installed agent ([program, ...args]), or undefined when it is missing:
 * then `t` has a skipped assertion saying how to install it (`needs` names what needed it, the
 * test's name by default), or, under CHATD_REQUIRE_SERVICES=1, a failure.
 */
export function agentCommand (t: Test, agent: Agent, needs = t.name): string[] | undefined {
  const found = installedAgent(agent)
  if ('command' in found) return found.command
  if (process.env.CHATD_REQUIRE_SERVICES === '1') t.fail(`${needs}: ${found.missing}, and CHATD_REQUIRE_SERVICES=1 says it must be there`)
  else t.pass(`${needs} needs ${agent.package}`, { skip: found.missing })
  return undefined
}
