// The Responses `tools` and `tool_choice` as the completion request takes them
// (../pipeline/request.ts: the engine's tool definitions and choice). Function
// tools pass as they are; a namespace's functions are offered like any
// function, under the name `<namespace>__<name>`, and their calls come back as
// the Responses API returns them: `name` the function's own, `namespace` the
// group's. The hosted `web_search` tool becomes a `web_search` function that
// chatd itself runs (../pipeline/hosted-search.ts), when a search provider is
// configured; without one, and for every other hosted tool (file search, code
// interpreter, computer use, image generation, remote MCP, custom tools), the
// tool is ignored, unless tool_choice forces it: then 400 naming it.

import { Compile } from 'typebox/compile'
import { ApiError, invalidParam } from '../../errors.ts'
import type { ToolChoice, ToolDefinition } from '../../engine/backend.ts'
import { WEB_SEARCH_FUNCTION, webSearchFunction } from '../pipeline/hosted-search.ts'
import { FunctionTool, NamespaceTool, type ResponsesRequest } from './schema.ts'

const WEB_SEARCH_TYPES = new Set(['web_search', 'web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11'])
const NAMESPACE_SEPARATOR = '__'

/** How a call to an offered function is returned: a client's function (maybe in a namespace), or chatd's web search. */
export type CallTarget = { name: string; namespace?: string } | { hosted: 'web_search' }

export interface ToolPlan {
  tools: ToolDefinition[]
  /** For each offered tool, the Responses field it came from (`tools[2]`, `tools[3].tools[1]`): error params point there. */
  sources: string[]
  /** Offered function name -> what its calls are returned as. */
  targets: Map<string, CallTarget>
  toolChoice?: ToolChoice
  /** chatd runs web_search calls itself. */
  webSearch: boolean
}

const checkFunction = Compile(FunctionTool)
const checkNamespace = Compile(NamespaceTool)

/** The name a function is offered to the model under: a namespace's functions carry the namespace before theirs. */
export function offeredName (name: string, namespace?: string): string {
  return namespace === undefined ? name : `${namespace}${NAMESPACE_SEPARATOR}${name}`
}

/** 400 naming the first field of `value` that `check` refuses, under `at`. */
function assertShape (check: ReturnType<typeof Compile>, value: unknown, at: string): void {
  if (check.Check(value)) return
  const [first] = check.Errors(value)
  const path = (first?.instancePath ?? '').split('/').slice(1).map(s => /^\d+$/.test(s) ? `[${s}]` : `.${s}`).join('')
  const missing = first?.keyword === 'required' ? `.${String((first.params as { requiredProperties?: string[] }).requiredProperties?.[0] ?? '')}` : ''
  const param = `${at}${path}${missing}`
  throw invalidParam(param, `Invalid value for '${param}': ${first?.message ?? 'is invalid'}.`)
}

function functionTool (tool: unknown, at: string, namespace?: string): ToolDefinition {
  assertShape(checkFunction, tool, at)
  const fn = tool as FunctionTool
  return {
    type: 'function',
    function: {
      name: offeredName(fn.name, namespace),
      ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
      ...(fn.parameters ? { parameters: fn.parameters as Record<string, unknown> } : {}),
      ...(typeof fn.strict === 'boolean' ? { strict: fn.strict } : {}),
    },
  }
}

/** A hosted tool's type as the client named it, for messages. */
function isHostedSearch (type: string): boolean {
  return WEB_SEARCH_TYPES.has(type)
}

export function planTools (body: ResponsesRequest, opts: { searchConfigured: boolean }): ToolPlan {
  const plan: ToolPlan = { tools: [], sources: [], targets: new Map(), webSearch: false }
  let searchRequested = false
  ;(body.tools ?? []).forEach((tool, i) => {
    const at = `tools[${i}]`
    if (tool.type === 'function') {
      const offered = functionTool(tool, at)
      plan.tools.push(offered)
      plan.sources.push(at)
      plan.targets.set(offered.function.name, { name: offered.function.name })
    } else if (tool.type === 'namespace') {
      assertShape(checkNamespace, tool, at)
      const group = tool as unknown as { name: string; tools: Array<{ type: string }> }
      group.tools.forEach((inner, j) => {
        if (inner.type !== 'function') return // custom tools inside a namespace: not offered
        const offered = functionTool(inner, `${at}.tools[${j}]`, group.name)
        plan.tools.push(offered)
        plan.sources.push(`${at}.tools[${j}]`)
        plan.targets.set(offered.function.name, { name: (inner as FunctionTool).name, namespace: group.name })
      })
    } else if (isHostedSearch(tool.type)) {
      searchRequested = true
    }
    // Any other type is a hosted tool chatd cannot run: ignored (refused only when forced, below).
  })
  // A client function of the same name wins: the hosted search is then not offered.
  if (searchRequested && opts.searchConfigured && !plan.targets.has(WEB_SEARCH_FUNCTION)) {
    plan.webSearch = true
    plan.tools.push(webSearchFunction())
    plan.sources.push('tools')
    plan.targets.set(WEB_SEARCH_FUNCTION, { hosted: 'web_search' })
  }
  plan.toolChoice = toolChoiceOf(body, plan, opts.searchConfigured)
  return plan
}

function toolChoiceOf (body: ResponsesRequest, plan: ToolPlan, searchConfigured: boolean): ToolChoice | undefined {
  const choice = body.tool_choice
  if (choice === undefined || choice === null || typeof choice === 'string') return choice ?? undefined
  if (choice.type === 'function') {
    if (choice.name === undefined) throw invalidParam('tool_choice.name', 'tool_choice of type function needs the function\'s name.')
    return { type: 'function', function: { name: offeredName(choice.name, choice.namespace) } }
  }
  if (choice.type === 'allowed_tools') {
    const allowed = new Set<string>()
    for (const [j, entry] of (choice.tools ?? []).entries()) {
      if (entry.type === 'function' && entry.name !== undefined) allowed.add(offeredName(entry.name, entry.namespace))
      else if (isHostedSearch(entry.type) && plan.webSearch) allowed.add(WEB_SEARCH_FUNCTION)
      else if (entry.type !== 'function') hostedRefusal(entry.type, `tool_choice.tools[${j}]`, searchConfigured, choice.mode === 'required')
    }
    const kept = plan.tools.flatMap((tool, i) => allowed.has(tool.function.name) ? [[tool, plan.sources[i]] as const] : [])
    plan.tools = kept.map(([tool]) => tool)
    plan.sources = kept.map(([, source]) => source)
    plan.webSearch = plan.webSearch && allowed.has(WEB_SEARCH_FUNCTION)
    return choice.mode ?? 'auto'
  }
  if (isHostedSearch(choice.type) && plan.webSearch) return { type: 'function', function: { name: WEB_SEARCH_FUNCTION } }
  hostedRefusal(choice.type, 'tool_choice', searchConfigured, true)
  return undefined
}

/** A forced hosted tool chatd cannot run is refused; one merely allowed is ignored. */
function hostedRefusal (type: string, param: string, searchConfigured: boolean, forced: boolean): void {
  if (!forced) return
  if (isHostedSearch(type) && !searchConfigured) {
    throw new ApiError('search_unavailable', `${param} forces the hosted tool '${type}', but no search provider is configured on this server.`, { param })
  }
  throw invalidParam(param, `${param} forces the hosted tool '${type.slice(0, 64)}', which chatd cannot run; chatd runs function tools, namespaces of functions and web_search.`)
}
