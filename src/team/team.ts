/** A team: the agents a node starts in-process and the thread settings they run with. */
import { resolve } from 'node:path';
import { DEFAULT_THREAD_CONFIG, type ThreadConfig } from '../machines/thread.js';
import { configKindOf, loadTeamConfig, routerPromptsOf, threadConfigOf, DEFAULT_ROUTER_MAX_TOKENS, DEFAULT_ROUTER_TEMPERATURE } from '../config/team.js';
import { importUserModule } from '../config/user-module.js';
import { TroupeError } from '../protocol/errors.js';
import type { RouterPolicy } from '../routing/policy.js';
import { parseSanitiserPolicy, type SanitiserPolicy, type SanitiserPolicyInput } from '../sanitiser/sanitiser.js';
import type { LlmAgentOptions } from '../llm/agent.js';
import type { Synthesizer } from '../llm/synthesis.js';
import { isAgentDefinition, type AgentDefinition } from '../sdk/agent.js';
import { isRemoteAgentRef, resolveRemoteAgents, type RemoteAgentRef } from '../sdk/remote-agent.js';

export interface TeamDefinition {
  /** The team's id (team.yaml `id`). */
  id?: string;
  name: string;
  description?: string;
  agents: AgentDefinition[];
  /** Members behind someone else's A2A endpoint (`{ id, a2a: cardUrl, token? }`), joined by `withRemoteAgents`. */
  remote?: RemoteAgentRef[];
  /** Members that run as their own processes (`troupe agent`, Python agents) and join the mesh themselves. */
  members?: string[];
  config?: Partial<ThreadConfig>;
  /** Picks agents for messages nobody addressed (with `config.usePolicy`, the default when set). */
  policy?: RouterPolicy;
  /** Writes one answer from a fan-out's answers, with `config.orchestration.aggregation: 'synthesis'`. */
  synthesizer?: Synthesizer;
  /**
   * What agents may see of what other agents pass them (routed messages, handoffs, fan-out inputs):
   * a policy (src/sanitiser/sanitiser.ts), `false` for none. Default: mask every detector on those paths.
   */
  sanitiser?: SanitiserPolicyInput | false;
}

/** The thread settings a node runs a team with: its config over the defaults (what TroupeNode computes). */
export function threadSettingsOf(team: TeamDefinition): ThreadConfig {
  return { ...DEFAULT_THREAD_CONFIG, ...team.config, ...(team.policy && team.config?.usePolicy === undefined ? { usePolicy: true } : {}) };
}

/** What `defineTeam` takes: agents defined here, or remote A2A agents by their card URL. */
export type TeamInput = Omit<TeamDefinition, 'agents' | 'remote'> & { agents: Array<AgentDefinition | RemoteAgentRef> };

/**
 * Checks a team. A team may have no agents of its own (they run as separate processes) as long as it
 * names its entry agent or uses a router policy.
 */
export function defineTeam(input: TeamInput | TeamDefinition): TeamDefinition {
  const members: Array<AgentDefinition | RemoteAgentRef> = input.agents;
  const remote = [...((input as TeamDefinition).remote ?? []), ...members.filter((m): m is RemoteAgentRef => isRemoteAgentRef(m))];
  const team: TeamDefinition = { ...input, agents: members.filter((m): m is AgentDefinition => !isRemoteAgentRef(m)), ...(remote.length ? { remote } : {}) };
  if (team.agents.length === 0 && remote.length === 0 && !team.members?.length) {
    if (!team.config?.entryAgent && !team.policy)
      throw new TroupeError('CONFIG_INVALID', `team "${team.name}" has no agents: name config.entryAgent or give it a policy`);
    return team;
  }
  const ids = new Set<string>();
  for (const id of [...team.agents.map((a) => a.card.id), ...remote.map((r) => r.id), ...(team.members ?? [])]) {
    if (ids.has(id)) throw new TroupeError('CONFIG_INVALID', `team "${team.name}" has two agents with id "${id}"`);
    ids.add(id);
  }
  const entry = team.config?.entryAgent ?? team.agents[0]?.card.id ?? remote[0]?.id ?? team.members![0]!;
  if (!ids.has(entry)) throw new TroupeError('CONFIG_INVALID', `team "${team.name}": entry agent "${entry}" is not one of its agents`);
  return { ...team, config: { ...team.config, entryAgent: entry } };
}

/**
 * The team with its remote members resolved into agents (each remote card is fetched once): what a node
 * runs. Teams loaded with `loadModule` (`troupe up --team`) come this way already.
 */
export async function withRemoteAgents(team: TeamDefinition): Promise<TeamDefinition> {
  if (!team.remote?.length) return team;
  const { remote, ...rest } = team;
  return { ...rest, agents: [...team.agents, ...(await resolveRemoteAgents(remote))] };
}

/** What a node takes from a team: thread settings, the router policy and the sanitiser policy (validated). */
export function nodeOptionsOf(team: TeamDefinition | undefined): {
  config?: Partial<ThreadConfig>;
  policy?: RouterPolicy;
  sanitiser?: SanitiserPolicy | false;
  synthesizer?: Synthesizer;
} {
  if (!team) return {};
  return {
    ...(team.config ? { config: team.config } : {}),
    ...(team.policy ? { policy: team.policy } : {}),
    ...(team.synthesizer ? { synthesizer: team.synthesizer } : {}),
    ...(team.sanitiser === false ? { sanitiser: false as const } : team.sanitiser ? { sanitiser: parseSanitiserPolicy(team.sanitiser) } : {}),
  };
}

/**
 * Builds an agent from an agent.yaml (validated in full; its tools imported and its model key checked).
 * The model SDKs load only when this is called. Throws CONFIG_INVALID with every problem, or UNSUPPORTED.
 */
export async function loadYamlAgent(file: string, opts: LlmAgentOptions = {}): Promise<AgentDefinition> {
  const { loadYamlAgent: load } = await import('../llm/agent.js');
  return load(file, opts);
}

/**
 * Loads a team or a single agent from a module's default export (or named `team` / `agent`), or a
 * single agent from an agent.yaml (`.yaml` / `.yml`).
 */
export async function loadModule(path: string): Promise<{ team?: TeamDefinition; agents: AgentDefinition[] }> {
  if (/\.ya?ml$/i.test(path)) {
    const { readFileSync } = await import('node:fs');
    let text = '';
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      // The loader reports a missing or unreadable file with its position.
    }
    if (configKindOf(text) === 'team') {
      const team = await withRemoteAgents(await loadTeamYaml(path));
      return { team, agents: team.agents };
    }
    return { agents: [await loadYamlAgent(path)] };
  }
  const mod = await importUserModule(path);
  const candidate = mod.default ?? mod.team ?? mod.agent;
  if (isAgentDefinition(candidate)) return { agents: [candidate] };
  if (Array.isArray(candidate) && candidate.every(isAgentDefinition)) return { agents: candidate };
  if (candidate && typeof candidate === 'object' && 'agents' in candidate) {
    const team = await withRemoteAgents(candidate as TeamDefinition);
    return { team, agents: team.agents };
  }
  throw new TroupeError('CONFIG_INVALID', `${path} exports no agent or team: export default defineAgent({...}) or defineTeam({...})`);
}

/**
 * Builds a team from a team.yaml: validated in full (every problem at once, with the problems of its
 * agent.yaml members), its agent.yaml members built, its TS modules imported, its remote members kept as
 * references (`withRemoteAgents` fetches their cards), its router made from the model block. Throws
 * CONFIG_INVALID. A module member contributes its agents (a team module's settings are not used).
 */
export async function loadTeamYaml(file: string, opts: LlmAgentOptions & { env?: NodeJS.ProcessEnv } = {}): Promise<TeamDefinition> {
  const env = opts.env ?? process.env;
  const { config, dir } = loadTeamConfig(file, env);
  const agents: AgentDefinition[] = [];
  const remote: RemoteAgentRef[] = [];
  const members: string[] = [];
  for (const member of config.agents) {
    if (member.file !== undefined) {
      agents.push(await loadYamlAgent(resolve(dir, member.file), opts));
    } else if (member.module !== undefined) {
      const loaded = await loadModule(resolve(dir, member.module));
      const got = loaded.agents.map((a) => a.card.id);
      const missing = (member.ids ?? []).filter((id) => !got.includes(id));
      if (missing.length) {
        throw new TroupeError(
          'CONFIG_INVALID',
          `${file}: module ${member.module} provides ${got.join(', ') || 'no agents'}, not ${missing.join(', ')} (declared in its ids)`,
        );
      }
      agents.push(...loaded.agents);
    } else if (member.a2a !== undefined && member.id !== undefined) {
      remote.push({
        id: member.id,
        a2a: member.a2a,
        ...(member.token ? { token: member.token } : {}),
        ...(member.timeout_ms ? { timeoutMs: member.timeout_ms } : {}),
      });
    } else if (member.id !== undefined) {
      members.push(member.id);
    }
  }
  const ids = [...agents.map((a) => a.card.id), ...remote.map((r) => r.id), ...members];
  const entry = config.entry ?? ids[0]!;
  for (const [what, id] of [
    ['entry', config.entry],
    ['routing.fallback_agent', config.routing.fallback_agent],
  ] as const) {
    if (id !== undefined && !ids.includes(id))
      throw new TroupeError('CONFIG_INVALID', `${file}: ${what} "${id}" is not a member of the team (members: ${ids.join(', ')})`);
  }
  let policy: RouterPolicy | undefined;
  if (config.router) {
    const { createProvider } = await import('../llm/providers/index.js');
    const { LlmRouterPolicy } = await import('../routing/llm-policy.js');
    const model = {
      ...config.router.model,
      temperature: config.router.model.temperature ?? DEFAULT_ROUTER_TEMPERATURE,
      max_tokens: config.router.model.max_tokens ?? DEFAULT_ROUTER_MAX_TOKENS,
    };
    const provider = createProvider(model, { env, timeoutMs: config.router.timeout_ms, where: `${file}: router.model` });
    // One model call per attempt: the thread's router retries up to routing.router_max_attempts.
    policy = new LlmRouterPolicy({
      provider,
      prompts: routerPromptsOf(config.router),
      historyMessages: config.router.history_messages,
      maxAttempts: 1,
      timeoutMs: config.router.timeout_ms,
    });
  }
  let synthesizer: Synthesizer | undefined;
  const synthesisModel = config.orchestration.synthesis?.model ?? config.router?.model;
  if (config.orchestration.aggregation === 'synthesis' && synthesisModel) {
    const { createProvider } = await import('../llm/providers/index.js');
    const { modelSynthesizer } = await import('../llm/synthesis.js');
    const where = config.orchestration.synthesis?.model ? 'orchestration.synthesis.model' : 'router.model';
    synthesizer = modelSynthesizer(createProvider(synthesisModel, { env, where: `${file}: ${where}` }), config.orchestration.synthesis?.prompt);
  }
  return defineTeam({
    id: config.id,
    name: config.name,
    ...(config.description !== undefined ? { description: config.description } : {}),
    agents: [...agents, ...remote],
    ...(members.length ? { members } : {}),
    config: threadConfigOf(config, entry),
    ...(policy ? { policy } : {}),
    ...(synthesizer ? { synthesizer } : {}),
  });
}
