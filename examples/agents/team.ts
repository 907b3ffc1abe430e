/**
 * Thread settings for the end-to-end suite: `troupe up --nats <url> --team examples/agents/team.ts`.
 * The agents run as their own processes (`troupe agent examples/agents/<id>.ts`), so the team has none.
 * `defineTeam` refuses a team without agents; `troupe up --team` only needs an `agents` key (see
 * `loadModule`), so this is a plain TeamDefinition.
 */
import type { TeamDefinition } from 'troupe';

const team: TeamDefinition = {
  name: 'e2e',
  agents: [],
  config: { entryAgent: 'triage', maxHops: 4, agentTimeoutMs: 3_000, retries: 1, retryDelayMs: 100 },
};

export default team;
