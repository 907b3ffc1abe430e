/**
 * Seed 004's agent capabilities (AgentCapabilities `multi_turn` / `hitl_support`, HandoffCapability,
 * OrchestrationCapability) declared in an agent.yaml: stated on the agent's card in the capabilities
 * extension's params (parsed back with its zod schema, the seed's defaults filled in), and shown by
 * `troupe validate`. A file that gets a field wrong is refused with the field named.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadYamlAgent } from '../src/llm/agent.js';
import { AGENT_CAPABILITIES_URI, AgentCapabilityParamsSchema, agentCapabilityParams } from '../src/protocol/capabilities.js';
import { cliTestTimeout, runTroupe } from './helpers/processes.js';

const FILE = 'test/fixtures/agent-yaml/seed-004/skill-builder.yaml';
const EXPECTED = {
  multi_turn: true,
  hitl_support: true,
  handoff: {
    supports_handoff: true,
    handoff_triggers: ['create skill', 'build skill'],
    workflow_states: ['gathering_requirements', 'drafting', 'reviewing', 'saving'],
    requires_exclusive_control: true,
    max_session_duration_seconds: 1800,
  },
  // can_orchestrate is left out: the card says what Troupe does (an agent may delegate unless it says not).
  orchestration: { can_orchestrate: true, can_be_orchestrated: false, supported_delegation_strategies: ['sequential'], max_concurrent_delegations: 2 },
};

describe("seed 004's capabilities on an agent card", () => {
  it('are stated in the card extension params, in the seed field names, and parse back with the schema', async () => {
    const agent = await loadYamlAgent(FILE, { env: { OPENAI_API_KEY: 'sk-test' } });
    const ext = agent.card.capabilities.extensions?.find((e) => e.uri === AGENT_CAPABILITIES_URI);
    expect(ext?.params).toEqual(EXPECTED);
    expect(AgentCapabilityParamsSchema.parse(ext?.params)).toEqual(EXPECTED);
    expect(agentCapabilityParams(agent.card)).toEqual(EXPECTED);
    // The seed's defaults for what a card leaves out.
    expect(AgentCapabilityParamsSchema.parse({})).toEqual({
      multi_turn: false,
      hitl_support: false,
      handoff: { supports_handoff: false, handoff_triggers: [], workflow_states: [], requires_exclusive_control: true, max_session_duration_seconds: 3600 },
      orchestration: {
        can_orchestrate: false,
        can_be_orchestrated: true,
        supported_delegation_strategies: ['parallel', 'sequential'],
        max_concurrent_delegations: 5,
      },
    });
  });

  it('are shown by troupe validate, and a wrong one is refused with its field', { timeout: cliTestTimeout(2) }, async () => {
    const text = await runTroupe(['validate', FILE], {});
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(
      'capabilities: multi-turn, human in the loop; handoff (triggers create skill, build skill; states gathering_requirements → drafting → reviewing → saving; exclusive; at most 1800 s); orchestrates, may not be orchestrated',
    );
    const json = JSON.parse((await runTroupe(['validate', FILE, '--json'], {})).stdout) as { agent: { capabilities: unknown } };
    expect(json.agent.capabilities).toEqual(EXPECTED);

    const dir = mkdtempSync(join(tmpdir(), 'troupe-capabilities-'));
    try {
      const bad = join(dir, 'agent.yaml');
      writeFileSync(bad, readFileSync(FILE, 'utf8').replace('[sequential]', '[round_robin]'));
      const refused = await runTroupe(['validate', bad, '--json'], {});
      expect(refused.code).toBe(2);
      const problems = (JSON.parse(refused.stdout) as { problems: Array<{ path: string }> }).problems;
      expect(problems.map((p) => p.path)).toEqual(['capabilities.orchestration.supported_delegation_strategies[0]']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
