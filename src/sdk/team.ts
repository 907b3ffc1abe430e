/** A team: the agents a node starts in-process and the thread settings they run with. */
import type { ThreadConfig } from '../machines/thread.js';
import type { RouterPolicy } from '../routing/scoring.js';
import { parseSanitiserPolicy, type SanitiserPolicy, type SanitiserPolicyInput } from '../security/sanitiser.js';
import type { LlmAgentOptions } from '../llm/agent.js';
import { isAgentDefinition, type AgentDefinition } from './agent.js';
import { isRemoteAgentRef, resolveRemoteAgents, type RemoteAgentRef } from './remote-agent.js';

export interface TeamDefinition {
  name: string;
  agents: AgentDefinition[];
  /** Members behind someone else's A2A endpoint (`{ id, a2a: cardUrl, token? }`), joined by `withRemoteAgents`. */
  remote?: RemoteAgentRef[];
  config?: Partial<ThreadConfig>;
  /** Picks agents for messages nobody addressed (with `config.usePolicy`, the default when set). */
  policy?: RouterPolicy;
  /**
   * What agents may see of what other agents pass them (routed messages, handoffs, fan-out inputs):
   * a policy (src/security/sanitiser.ts), `false` for none. Default: mask every detector on those paths.
   */
  sanitiser?: SanitiserPolicyInput | false;
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
  if (team.agents.length === 0 && remote.length === 0) {
    if (!team.config?.entryAgent && !team.policy) throw new Error(`team "${team.name}" has no agents: name config.entryAgent or give it a policy`);
    return team;
  }
  const ids = new Set<string>();
  for (const id of [...team.agents.map((a) => a.card.id), ...remote.map((r) => r.id)]) {
    if (ids.has(id)) throw new Error(`team "${team.name}" has two agents with id "${id}"`);
    ids.add(id);
  }
  const entry = team.config?.entryAgent ?? team.agents[0]?.card.id ?? remote[0]!.id;
  if (!ids.has(entry)) throw new Error(`team "${team.name}": entry agent "${entry}" is not one of its agents`);
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
export function nodeOptionsOf(team: TeamDefinition | undefined): { config?: Partial<ThreadConfig>; policy?: RouterPolicy; sanitiser?: SanitiserPolicy | false } {
  if (!team) return {};
  return {
    ...(team.config ? { config: team.config } : {}),
    ...(team.policy ? { policy: team.policy } : {}),
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
  if (/\.ya?ml$/i.test(path)) return { agents: [await loadYamlAgent(path)] };
  const { pathToFileURL } = await import('node:url');
  const { resolve } = await import('node:path');
  const mod = (await import(pathToFileURL(resolve(path)).href)) as Record<string, unknown>;
  const candidate = mod.default ?? mod.team ?? mod.agent;
  if (isAgentDefinition(candidate)) return { agents: [candidate] };
  if (Array.isArray(candidate) && candidate.every(isAgentDefinition)) return { agents: candidate };
  if (candidate && typeof candidate === 'object' && 'agents' in candidate) {
    const team = await withRemoteAgents(candidate as TeamDefinition);
    return { team, agents: team.agents };
  }
  throw new Error(`${path} exports no agent or team: export default defineAgent({...}) or defineTeam({...})`);
}
