/**
 * `team.yaml`: the declaration of a team — its members (agent.yaml files, TS modules, remote A2A agents,
 * agents that join on their own), its entry agent or LLM router, and the thread, routing and
 * orchestration settings, with the defaults of the thread machine (DEFAULT_THREAD_CONFIG).
 *
 * Loaded like agent.yaml (`load.ts`): the zod schema holds the shape, the document checks hold the rules
 * between fields and to the file system (member files exist, each agent.yaml is itself valid, ids are
 * unique, the entry and fallback agents are members), and every problem is reported at once with its
 * file, line, column and field path. A member's agent.yaml problems are reported with its own file.
 *
 * What becomes of the settings: `threadConfigOf` (the ThreadConfig of the node) and the router options
 * of `src/routing/llm-policy.ts`; `src/team/team.ts` builds the TeamDefinition a node runs.
 */
import { dirname, extname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { DEFAULT_THREAD_CONFIG, type ThreadConfig } from './thread.js';
import { DEFAULT_CHECKPOINTS_KEPT, MAX_CHECKPOINTS_KEPT } from '../protocol/checkpoint.js';
import { DEFAULT_ROUTER_PROMPTS, type RouterPrompts } from './router-prompts.js';
import { USER_MODULE_EXTENSIONS } from './user-module.js';
import { checkModel, ModelConfigSchema, validateAgentFile } from './agent.js';
import { ConfigError, loadYamlConfig, type CheckContext, type ConfigProblem, type PathSegment } from './load.js';

const ORCHESTRATION_STRATEGIES = ['parallel', 'sequential', 'first_success'] as const;
const MODULE_FILE_EXTENSIONS = USER_MODULE_EXTENSIONS;
const MAX_TEAM_MEMBERS = 100;
/** The router's defaults where the issue sets them: temperature 0.3, 500 output tokens, the last 10 messages. */
export const DEFAULT_ROUTER_TEMPERATURE = 0.3;
export const DEFAULT_ROUTER_MAX_TOKENS = 500;
const DEFAULT_ROUTER_HISTORY_MESSAGES = 10;
const DEFAULT_ROUTER_TIMEOUT_MS = 15_000;

const AgentId = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z][A-Za-z0-9-]*$/, '{value} must start with a letter and contain only letters, digits and -')
  .refine((v) => v !== 'user' && v !== 'sender' && v !== 'troupe', { message: '{value} is reserved' });

const DurationMs = z
  .int()
  .positive()
  .max(24 * 3600_000);
const Text = z.string().min(1).max(5000);

/**
 * One member, by which key it has: `file` (an agent.yaml), `module` (a TS/JS module, with the `ids` it
 * provides), `id` + `a2a` (a remote A2A agent by its card URL, with an optional bearer `token`), or `id`
 * alone (an agent that runs as its own process and joins the mesh itself). One flat shape, so a wrong
 * field is reported at that field; which keys go together is a document check.
 */
const MemberSchema = z.strictObject({
  file: z.string().min(1).optional(),
  module: z.string().min(1).optional(),
  /** A module's agents, declared so the entry and fallback agents can be checked before it is imported. */
  ids: z.array(AgentId).min(1).max(MAX_TEAM_MEMBERS).optional(),
  id: AgentId.optional(),
  a2a: z
    .string()
    .refine((v) => /^https?:\/\//i.test(v) && URL.canParse(v), { message: '{value} is not an http(s) URL' })
    .optional(),
  token: z.string().min(1).optional(),
  timeout_ms: DurationMs.optional(),
});

/** Which fields a member of each kind may have. */
const MEMBER_KINDS: Array<{ key: 'file' | 'module' | 'a2a' | 'id'; fields: string[]; what: string }> = [
  { key: 'file', fields: ['file'], what: 'an agent.yaml member' },
  { key: 'module', fields: ['module', 'ids'], what: 'a module member' },
  { key: 'a2a', fields: ['id', 'a2a', 'token', 'timeout_ms'], what: 'a remote A2A member' },
  { key: 'id', fields: ['id'], what: 'a member that joins on its own' },
];

const RouterPromptsSchema = z.strictObject({
  system: Text.optional(),
  /** `{{history}}` and `{{message}}` mark where the earlier messages and the new one go. */
  user_template: Text.optional(),
  catalog_header: z.string().max(500).optional(),
  include_capabilities: z.boolean().optional(),
  include_examples: z.boolean().optional(),
  /** What the user is told when the router is not sure; `{{candidate}}`, `{{confidence}}`, `{{reasoning}}`. */
  clarification_template: Text.optional(),
  /** The route-log reason when the fallback agent answers; `{{attempts}}`, `{{error}}`, `{{agent}}`. */
  fallback_reason_template: Text.optional(),
});

const RouterSchema = z.strictObject({
  model: ModelConfigSchema,
  /** Earlier messages of the thread the router sees besides the new one. */
  history_messages: z.int().min(0).max(50).default(DEFAULT_ROUTER_HISTORY_MESSAGES),
  timeout_ms: DurationMs.default(DEFAULT_ROUTER_TIMEOUT_MS),
  prompts: RouterPromptsSchema.optional(),
});
export type RouterConfig = z.infer<typeof RouterSchema>;

const RoutingSchema = z.strictObject({
  max_routing_hops: z.int().min(1).max(100).default(DEFAULT_THREAD_CONFIG.maxHops),
  history_limit: z.int().min(1).max(1000).default(DEFAULT_THREAD_CONFIG.historyLimit),
  agent_timeout_ms: DurationMs.default(DEFAULT_THREAD_CONFIG.agentTimeoutMs),
  retries: z.int().min(0).max(10).default(DEFAULT_THREAD_CONFIG.retries),
  retry_delay_ms: z.int().min(0).max(600_000).default(DEFAULT_THREAD_CONFIG.retryDelayMs),
  confidence_threshold: z.number().min(0).max(1).default(DEFAULT_THREAD_CONFIG.threshold),
  router_max_attempts: z.int().min(1).max(10).default(DEFAULT_THREAD_CONFIG.maxAttempts),
  fallback_agent: AgentId.optional(),
  /** The agent that asks the user when the router is unsure (instead of clarification_text). */
  clarification_agent: AgentId.optional(),
  clarification_text: Text.default(DEFAULT_THREAD_CONFIG.clarifyText),
  handoff_max_duration_ms: DurationMs.default(DEFAULT_THREAD_CONFIG.handoffMaxDurationMs),
  /** `open`: an answer leaves the task input-required (the conversation goes on in it); `answer`: an answer completes it. */
  task_end: z.enum(['open', 'answer']).default('open'),
  /** `true`: an agent's Task in failed, rejected or canceled ends the task; default, it is the turn's AGENT_ERROR and the task stays open. */
  agent_ends_failed: z.boolean().default(false),
});

const OrchestrationSchema = z.strictObject({
  /** `false`: a router decision's additional agents are not called (seed 003's EnableMultiAgentCoordination). */
  multi_agent: z.boolean().default(true),
  strategy: z.enum(ORCHESTRATION_STRATEGIES).default(DEFAULT_THREAD_CONFIG.orchestration.strategy),
  max_parallel_agents: z.int().min(1).max(20).default(DEFAULT_THREAD_CONFIG.orchestration.maxParallelAgents),
  fallback_message: Text.optional(),
  partial_failure_template: Text.optional(),
  /** `join`: each answer attributed; `synthesis`: a model writes one answer from them (the join when it fails). */
  aggregation: z.enum(['join', 'synthesis']).default('join'),
  /** The synthesis model (default: the router's) and its instructions. */
  synthesis: z.strictObject({ model: ModelConfigSchema.optional(), prompt: Text.optional() }).optional(),
});

/** What the team lets its agents do (lists of agent ids; absent: every agent), on top of their cards. */
const PermissionsSchema = z.strictObject({
  handoff: z
    .strictObject({ initiate: z.array(AgentId).max(MAX_TEAM_MEMBERS).optional(), accept: z.array(AgentId).max(MAX_TEAM_MEMBERS).optional() })
    .optional(),
  delegate: z.array(AgentId).max(MAX_TEAM_MEMBERS).optional(),
});

const TeamConfigSchema = z.strictObject({
  id: AgentId,
  name: z.string().min(1).max(200),
  description: z.string().max(2000).optional(),
  agents: z.array(MemberSchema).min(1).max(MAX_TEAM_MEMBERS),
  /** The agent a message nobody addressed goes to (without a router; with one, where it starts). Default: the first member. */
  entry: AgentId.optional(),
  /** An LLM picks the agent for each message nobody addressed. */
  router: RouterSchema.optional(),
  routing: RoutingSchema.prefault({}),
  orchestration: OrchestrationSchema.prefault({}),
  permissions: PermissionsSchema.optional(),
  /** Checkpoints each thread keeps, one per committed turn (`troupe history`, `troupe fork`); 0 turns them off. */
  checkpoints: z.int().min(0).max(MAX_CHECKPOINTS_KEPT).default(DEFAULT_CHECKPOINTS_KEPT),
});
export type TeamConfig = z.infer<typeof TeamConfigSchema>;

// ---------------------------------------------------------------------------------------------------
// Document checks

type Raw = Record<string, unknown>;

function isRecord(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

const quote = (s: string) => JSON.stringify(s);

/** The `name` of an agent.yaml (its agent id), read leniently: the file's own problems are reported separately. */
function agentNameIn(text: string): string | undefined {
  try {
    const doc: unknown = parseYaml(text, { maxAliasCount: 100 });
    return isRecord(doc) ? str(doc.name) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The rules of team.yaml beyond its schema. `nested` collects the problems of member agent.yaml files
 * (each with its own file and position), `nestedWarnings` their warnings.
 */
function checkTeamDocument(
  raw: unknown,
  ctx: CheckContext,
  nested: ConfigProblem[],
  env: NodeJS.ProcessEnv,
  teamFile: string,
  nestedWarnings: ConfigProblem[] = [],
): void {
  if (!isRecord(raw)) return;
  const members = Array.isArray(raw.agents) ? raw.agents : [];
  /** Member id -> where it was declared. */
  const ids = new Map<string, string>();
  /** False when a module declares no ids: membership cannot be decided before it is imported. */
  let complete = true;
  const declare = (id: string | undefined, path: PathSegment[], where: string) => {
    if (!id) return;
    const first = ids.get(id);
    if (first !== undefined) ctx.report(path, 'constraints', `agent id ${quote(id)} is already a member (${first})`);
    else ids.set(id, where);
  };
  members.forEach((member, i) => {
    if (!isRecord(member)) return;
    const path: PathSegment[] = ['agents', i];
    const kind = MEMBER_KINDS.find((k) => member[k.key] !== undefined);
    if (!kind) {
      ctx.report(
        path,
        'exclusivity',
        'names no member: give file (an agent.yaml), module (a TS module), id and a2a (a remote agent) or id (an agent that joins on its own)',
      );
      return;
    }
    for (const key of Object.keys(member)) {
      const known = MEMBER_KINDS.some((k) => k.fields.includes(key));
      if (known && !kind.fields.includes(key))
        ctx.report([...path, key], 'exclusivity', `does not go with ${kind.key} (${kind.what} has ${kind.fields.join(', ')})`, 'key');
    }
    const file = kind.key === 'file' ? str(member.file) : undefined;
    const mod = kind.key === 'module' ? str(member.module) : undefined;
    if (file) {
      const kind = ctx.kindOf(file);
      if (!/\.ya?ml$/i.test(file)) ctx.report([...path, 'file'], 'constraints', `${quote(file)} must be an agent.yaml (.yaml or .yml)`);
      else if (kind === undefined) ctx.report([...path, 'file'], 'references', `${quote(file)} does not exist (relative to the team.yaml's folder)`);
      else if (kind === 'dir') ctx.report([...path, 'file'], 'references', `${quote(file)} is a directory, not a file`);
      else {
        const text = ctx.readText(file);
        const name = text !== undefined ? agentNameIn(text) : undefined;
        const { problems, warnings } = validateAgentFile(isAbsolute(file) ? file : join(dirname(teamFile), file), env);
        nestedWarnings.push(...warnings);
        if (problems.length) {
          ctx.report(
            [...path, 'file'],
            'references',
            `${quote(file)} is not a valid agent.yaml (${problems.length} problem${problems.length === 1 ? '' : 's'}, listed with its file)`,
          );
          nested.push(...problems);
        }
        if (name) declare(name, [...path, 'file'], `agents[${i}], ${file}`);
        else complete = false;
      }
    } else if (mod) {
      const ext = extname(mod).toLowerCase();
      if (!(MODULE_FILE_EXTENSIONS as readonly string[]).includes(ext)) {
        ctx.report([...path, 'module'], 'constraints', `${quote(mod)} must be a ${MODULE_FILE_EXTENSIONS.join(', ')} module`);
      } else if (ctx.kindOf(mod) !== 'file') {
        ctx.report([...path, 'module'], 'references', `${quote(mod)} does not exist (relative to the team.yaml's folder)`);
      }
      if (Array.isArray(member.ids)) member.ids.forEach((id, j) => declare(str(id), [...path, 'ids', j], `agents[${i}], ${mod}`));
      else complete = false;
    } else {
      declare(str(member.id), [...path, 'id'], `agents[${i}]`);
    }
  });

  const known = [...ids.keys()];
  const mustBeMember = (id: unknown, path: PathSegment[], what: string) => {
    const value = str(id);
    if (!value || !complete || ids.has(value)) return;
    ctx.report(path, 'references', `${what} ${quote(value)} is not a member of the team (members: ${known.join(', ') || 'none'})`);
  };
  mustBeMember(raw.entry, ['entry'], 'the entry agent');
  if (isRecord(raw.routing)) {
    mustBeMember(raw.routing.fallback_agent, ['routing', 'fallback_agent'], 'the fallback agent');
    mustBeMember(raw.routing.clarification_agent, ['routing', 'clarification_agent'], 'the clarification agent');
    if (raw.routing.fallback_agent !== undefined && !isRecord(raw.router)) {
      ctx.report(['routing', 'fallback_agent'], 'constraints', 'applies with a router only: without one, every message goes to the entry agent');
    }
  }
  if (isRecord(raw.permissions)) {
    const perms = raw.permissions;
    const each = (list: unknown, path: PathSegment[], what: string) => {
      if (Array.isArray(list)) list.forEach((id, j) => mustBeMember(id, [...path, j], what));
    };
    if (isRecord(perms.handoff)) {
      each(perms.handoff.initiate, ['permissions', 'handoff', 'initiate'], 'the agent allowed to start handoffs');
      each(perms.handoff.accept, ['permissions', 'handoff', 'accept'], 'the agent allowed to take handoffs');
    }
    each(perms.delegate, ['permissions', 'delegate'], 'the agent allowed to delegate');
  }
  const prompts = isRecord(raw.router) && isRecord(raw.router.prompts) ? raw.router.prompts : undefined;
  if (prompts && prompts.clarification_template !== undefined && isRecord(raw.routing) && raw.routing.clarification_text !== undefined) {
    ctx.report(
      ['router', 'prompts', 'clarification_template'],
      'constraints',
      'give routing.clarification_text or router.prompts.clarification_template, not both',
    );
  }
  if (prompts && typeof prompts.user_template === 'string' && !prompts.user_template.includes('{{message}}')) {
    ctx.report(['router', 'prompts', 'user_template'], 'constraints', 'must contain {{message}} (where the new message goes)');
  }
  if (isRecord(raw.orchestration) && raw.orchestration.aggregation === 'synthesis') {
    const own = isRecord(raw.orchestration.synthesis) && raw.orchestration.synthesis.model !== undefined;
    if (!own && !isRecord(raw.router))
      ctx.report(
        ['orchestration', 'aggregation'],
        'references',
        'synthesis needs a model: give orchestration.synthesis.model, or a router (its model is used)',
      );
  } else if (isRecord(raw.orchestration) && raw.orchestration.synthesis !== undefined) {
    ctx.report(['orchestration', 'synthesis'], 'constraints', 'applies with aggregation: synthesis only');
  }
  if (isRecord(raw.router)) checkModel(ctx, raw.router.model, ['router', 'model']);
  if (isRecord(raw.orchestration) && isRecord(raw.orchestration.synthesis))
    checkModel(ctx, raw.orchestration.synthesis.model, ['orchestration', 'synthesis', 'model']);
}

// ---------------------------------------------------------------------------------------------------
// Loading

export interface LoadedTeamConfig {
  config: TeamConfig;
  /** The team.yaml as named by the caller. */
  file: string;
  /** Its folder (absolute): member paths resolve against it. */
  dir: string;
}

/** Every problem of a team.yaml and of its agent.yaml members (empty when valid), their warnings, and the config when it is valid. */
export function validateTeamFile(
  file: string,
  env: NodeJS.ProcessEnv = process.env,
): { problems: ConfigProblem[]; warnings: ConfigProblem[]; loaded?: LoadedTeamConfig } {
  const nested: ConfigProblem[] = [];
  const nestedWarnings: ConfigProblem[] = [];
  const res = loadYamlConfig({ file, schema: TeamConfigSchema, check: (raw, ctx) => checkTeamDocument(raw, ctx, nested, env, file, nestedWarnings), env });
  const warnings = [...res.warnings, ...nestedWarnings];
  if (!res.ok) return { problems: [...res.problems, ...nested], warnings };
  return { problems: [], warnings, loaded: { config: res.value, file: res.file, dir: res.dir } };
}

/** Loads a team.yaml; throws ConfigError (CONFIG_INVALID) with every problem when it is not valid. */
export function loadTeamConfig(file: string, env: NodeJS.ProcessEnv = process.env): LoadedTeamConfig {
  const { problems, loaded } = validateTeamFile(file, env);
  if (!loaded) throw new ConfigError(file, problems);
  return loaded;
}

/** Whether a YAML file declares a team (a top-level `agents` list) or an agent. */
export function configKindOf(text: string): 'team' | 'agent' {
  try {
    const doc: unknown = parseYaml(text, { maxAliasCount: 100 });
    return isRecord(doc) && 'agents' in doc && !('model' in doc) ? 'team' : 'agent';
  } catch {
    return 'agent';
  }
}

/** The router's prompt pieces: the configured ones over the defaults. */
export function routerPromptsOf(router: RouterConfig): RouterPrompts {
  const p = router.prompts ?? {};
  return {
    system: p.system ?? DEFAULT_ROUTER_PROMPTS.system,
    userTemplate: p.user_template ?? DEFAULT_ROUTER_PROMPTS.userTemplate,
    catalogHeader: p.catalog_header ?? DEFAULT_ROUTER_PROMPTS.catalogHeader,
    includeCapabilities: p.include_capabilities ?? DEFAULT_ROUTER_PROMPTS.includeCapabilities,
    includeExamples: p.include_examples ?? DEFAULT_ROUTER_PROMPTS.includeExamples,
  };
}

/** The thread settings of a team.yaml, every field set (the defaults filled in by the schema). */
export function threadConfigOf(config: TeamConfig, entryAgent: string): ThreadConfig {
  const r = config.routing;
  const o = config.orchestration;
  const clarify = config.router?.prompts?.clarification_template ?? r.clarification_text;
  const fallbackReason = config.router?.prompts?.fallback_reason_template;
  return {
    entryAgent,
    maxHops: r.max_routing_hops,
    historyLimit: r.history_limit,
    agentTimeoutMs: r.agent_timeout_ms,
    retries: r.retries,
    retryDelayMs: r.retry_delay_ms,
    usePolicy: config.router !== undefined,
    threshold: r.confidence_threshold,
    maxAttempts: r.router_max_attempts,
    ...(r.fallback_agent ? { fallbackAgent: r.fallback_agent } : {}),
    ...(r.clarification_agent ? { clarificationAgent: r.clarification_agent } : {}),
    clarifyText: clarify,
    ...(fallbackReason ? { fallbackReasonTemplate: fallbackReason } : {}),
    ...(config.router ? { routerHistoryMessages: config.router.history_messages } : {}),
    handoffMaxDurationMs: r.handoff_max_duration_ms,
    ...(config.checkpoints !== DEFAULT_CHECKPOINTS_KEPT ? { checkpoints: config.checkpoints } : {}),
    ...(r.task_end === 'answer' ? { taskEnd: 'answer' as const } : {}),
    ...(r.agent_ends_failed ? { agentEndsFailed: true } : {}),
    ...(config.permissions
      ? {
          permissions: {
            ...(config.permissions.handoff?.initiate ? { handoffInitiate: config.permissions.handoff.initiate } : {}),
            ...(config.permissions.handoff?.accept ? { handoffAccept: config.permissions.handoff.accept } : {}),
            ...(config.permissions.delegate ? { delegate: config.permissions.delegate } : {}),
          },
        }
      : {}),
    orchestration: {
      ...(o.multi_agent === false ? { multiAgent: false } : {}),
      strategy: o.strategy,
      maxParallelAgents: o.max_parallel_agents,
      ...(o.fallback_message ? { fallbackMessage: o.fallback_message } : {}),
      ...(o.partial_failure_template ? { partialFailureTemplate: o.partial_failure_template } : {}),
      ...(o.aggregation === 'synthesis' ? { aggregation: 'synthesis' as const } : {}),
    },
  };
}
