/**
 * team.yaml (src/config/team.ts, src/team/team.ts): every problem at once with file, line, column and
 * field path, an agent.yaml member's problems with its own file; the defaults of the thread machine;
 * a team.yaml and the TS module declaring the same team give the same team definition; the router is
 * built from its model block; `troupe validate` tells a team from an agent and exits 2 on problems.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatProblem } from '../src/config/load.js';
import { configKindOf, loadTeamConfig, threadConfigOf, validateTeamFile } from '../src/config/team.js';
import { DEFAULT_THREAD_CONFIG } from '../src/machines/thread.js';
import { TroupeError } from '../src/protocol/errors.js';
import { LlmRouterPolicy } from '../src/routing/llm-policy.js';
import { defineTeam, loadModule, loadTeamYaml, loadYamlAgent, threadSettingsOf, type TeamDefinition } from '../src/team/team.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { validateAgentFile } from '../src/config/agent.js';
import { cliTestTimeout, runTroupe } from './helpers/processes.js';

const DIR = 'test/fixtures/team-yaml';
const ENV = { OPENAI_API_KEY: 'sk-test-not-used' };
const tmp = mkdtempSync(join(tmpdir(), 'troupe-team-'));

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Writes a team.yaml into the temp folder and returns its path. */
function teamFile(name: string, text: string): string {
  const file = join(tmp, name);
  writeFileSync(file, text);
  return file;
}

const memberIds = (team: TeamDefinition) => [...team.agents.map((a) => a.card.id), ...(team.remote ?? []).map((r) => r.id), ...(team.members ?? [])].sort();

describe('team.yaml validation', () => {
  it('reports every problem of a file at once, each with file, line, column and field path, in phase order', () => {
    const { problems, loaded } = validateTeamFile(`${DIR}/invalid.yaml`, ENV);
    expect(loaded).toBeUndefined();
    expect(problems.map(formatProblem)).toEqual([
      `${DIR}/invalid.yaml:10:5 agents[4].colour: is not a known field`,
      `${DIR}/invalid.yaml:21:12 routing.retries: must be a number, not "many"`,
      `${DIR}/invalid.yaml:10:5 agents[4]: names no member: give file (an agent.yaml), module (a TS module), id and a2a (a remote agent) or id (an agent that joins on its own)`,
      `${DIR}/invalid.yaml:4:11 agents[0].file: "./missing/agent.yaml" does not exist (relative to the team.yaml's folder)`,
      `${DIR}/invalid.yaml:5:13 agents[1].module: "./nope.ts" does not exist (relative to the team.yaml's folder)`,
      `${DIR}/invalid.yaml:11:8 entry: the entry agent "nobody" is not a member of the team (members: ledger, partner)`,
      `${DIR}/invalid.yaml:19:19 routing.fallback_agent: the fallback agent "ghost" is not a member of the team (members: ledger, partner)`,
      `${DIR}/invalid.yaml:1:5 id: "9shop" must start with a letter and contain only letters, digits and -`,
      `${DIR}/invalid.yaml:7:9 agents[2].id: agent id "ledger" is already a member (agents[1], ./nope.ts)`,
      `${DIR}/invalid.yaml:9:10 agents[3].a2a: "not-a-url" is not an http(s) URL`,
      `${DIR}/invalid.yaml:13:51 router.model.temperature: must be at most 2, not 3`,
      `${DIR}/invalid.yaml:15:20 router.prompts.user_template: must contain {{message}} (where the new message goes)`,
      `${DIR}/invalid.yaml:16:29 router.prompts.clarification_template: give routing.clarification_text or router.prompts.clarification_template, not both`,
      `${DIR}/invalid.yaml:18:25 routing.confidence_threshold: must be at most 1, not 1.5`,
      `${DIR}/invalid.yaml:23:13 orchestration.strategy: "round_robin" is not one of parallel, sequential, first_success`,
    ]);
  });

  it("lists an agent.yaml member's problems with its own file, and fields that do not go together", () => {
    const { problems } = validateTeamFile(`${DIR}/nested.yaml`, ENV);
    expect(problems.map(formatProblem)).toEqual([
      `${DIR}/nested.yaml:6:5 agents[2].id: does not go with module (a module member has module, ids)`,
      `${DIR}/nested.yaml:4:11 agents[0].file: "bad-agent.yaml" is not a valid agent.yaml (1 problem, listed with its file)`,
      `${DIR}/nested.yaml:7:13 agents[2].module: "x.ts" does not exist (relative to the team.yaml's folder)`,
      `${DIR}/bad-agent.yaml:3:49 model.temperature: must be at most 2, not 9`,
    ]);
  });

  it('refuses two members with one id, an agent.yaml member among them, and a fallback agent without a router', () => {
    const file = teamFile(
      'dupes.yaml',
      [
        'id: dupes',
        'name: Dupes',
        'agents:',
        `  - file: ${join(process.cwd(), 'test/fixtures/yaml-agents/concierge/agent.yaml')}`,
        '  - id: concierge',
        'routing:',
        '  fallback_agent: concierge',
      ].join('\n'),
    );
    const messages = validateTeamFile(file, ENV).problems.map((p) => `${p.path}: ${p.message}`);
    expect(messages).toContain(
      'agents[1].id: agent id "concierge" is already a member (agents[0], ' + join(process.cwd(), 'test/fixtures/yaml-agents/concierge/agent.yaml') + ')',
    );
    expect(messages).toContain('routing.fallback_agent: applies with a router only: without one, every message goes to the entry agent');
  });

  it('a synthesis needs a model, and synthesis settings need aggregation: synthesis', () => {
    const noModel = teamFile('synth.yaml', 'id: s\nname: S\nagents:\n  - id: a\norchestration:\n  aggregation: synthesis\n');
    expect(validateTeamFile(noModel, ENV).problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'orchestration.aggregation: synthesis needs a model: give orchestration.synthesis.model, or a router (its model is used)',
    ]);
    const stray = teamFile('stray.yaml', 'id: s\nname: S\nagents:\n  - id: a\norchestration:\n  synthesis: {prompt: Combine}\n');
    expect(validateTeamFile(stray, ENV).problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'orchestration.synthesis: applies with aggregation: synthesis only',
    ]);
    const own = teamFile(
      'own.yaml',
      'id: s\nname: S\nagents:\n  - id: a\norchestration:\n  aggregation: synthesis\n  synthesis: {model: {provider: openai, name: m}}\n',
    );
    expect(validateTeamFile(own, ENV).problems).toEqual([]);
  });

  it('a TS team that cannot work is CONFIG_INVALID saying why (no agents, two with one id, an entry agent that is not one of them)', () => {
    const agent = (id: string) => defineAgent({ card: { id, name: id, description: id }, handle: () => reply('hi', { to: 'user' }) });
    const problem = (input: Parameters<typeof defineTeam>[0]) => {
      try {
        defineTeam(input);
      } catch (err) {
        return err instanceof TroupeError ? `${err.code}: ${err.message}` : `not a TroupeError: ${String(err)}`;
      }
      return 'no error';
    };
    expect(problem({ name: 'empty', agents: [] })).toBe('CONFIG_INVALID: team "empty" has no agents: name config.entryAgent or give it a policy');
    expect(problem({ name: 'twins', agents: [agent('a'), agent('a')] })).toBe('CONFIG_INVALID: team "twins" has two agents with id "a"');
    expect(problem({ name: 'lost', agents: [agent('a')], config: { entryAgent: 'b' } })).toBe(
      'CONFIG_INVALID: team "lost": entry agent "b" is not one of its agents',
    );
  });

  it("a router's and a synthesis model's temperature is held to anthropic's limit, as an agent's is", () => {
    const hot = teamFile(
      'hot.yaml',
      'id: s\nname: S\nagents:\n  - id: a\nrouter:\n  model: {provider: anthropic, name: m, temperature: 1.5}\norchestration:\n  aggregation: synthesis\n  synthesis: {model: {provider: anthropic, name: m, temperature: 1.2}}\n',
    );
    expect(validateTeamFile(hot, ENV).problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'router.model.temperature: must be at most 1 for anthropic, not 1.5',
      'orchestration.synthesis.model.temperature: must be at most 1 for anthropic, not 1.2',
    ]);
  });

  it("permissions name members, and become the thread's permissions", () => {
    const bad = teamFile(
      'perms-bad.yaml',
      'id: p\nname: P\nagents:\n  - id: a\n  - id: b\npermissions:\n  handoff: {initiate: [a, ghost]}\n  delegate: [nobody]\n',
    );
    expect(validateTeamFile(bad, ENV).problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'permissions.handoff.initiate[1]: the agent allowed to start handoffs "ghost" is not a member of the team (members: a, b)',
      'permissions.delegate[0]: the agent allowed to delegate "nobody" is not a member of the team (members: a, b)',
    ]);
    const good = teamFile(
      'perms.yaml',
      'id: p\nname: P\nagents:\n  - id: a\n  - id: b\npermissions:\n  handoff: {initiate: [a], accept: [b]}\n  delegate: [a]\n',
    );
    expect(validateTeamFile(good, ENV).problems).toEqual([]);
    expect(threadConfigOf(loadTeamConfig(good, ENV).config, 'a').permissions).toEqual({ handoffInitiate: ['a'], handoffAccept: ['b'], delegate: ['a'] });
  });

  it('fills in the defaults of the thread machine, and the router defaults', () => {
    const file = teamFile('minimal.yaml', 'id: minimal\nname: Minimal\nagents:\n  - id: solo\n');
    const { config } = loadTeamConfig(file, ENV);
    expect(threadConfigOf(config, 'solo')).toEqual({ ...DEFAULT_THREAD_CONFIG, entryAgent: 'solo' });
    const routed = loadTeamConfig(
      teamFile('routed.yaml', 'id: routed\nname: Routed\nagents:\n  - id: a\n  - id: b\nrouter:\n  model: {provider: openai, name: m}\n'),
      ENV,
    ).config;
    expect(routed.router).toEqual({ model: { provider: 'openai', name: 'm' }, history_messages: 10, timeout_ms: 15_000 });
    expect(threadConfigOf(routed, 'a')).toMatchObject({ usePolicy: true, maxAttempts: 3, threshold: 0.7, routerHistoryMessages: 10 });
  });

  it('tells a team.yaml from an agent.yaml', () => {
    expect(configKindOf('id: t\nname: T\nagents: []\n')).toBe('team');
    expect(configKindOf('name: a\nmodel: {provider: openai, name: m}\n')).toBe('agent');
    expect(configKindOf(': not yaml [')).toBe('agent');
  });
});

describe('team.yaml and TS teams', () => {
  it('a team.yaml and the TS module declaring the same team give the same definition', async () => {
    const fromYaml = await loadTeamYaml(`${DIR}/team.yaml`, { env: ENV });
    const fromTs = (await import('./fixtures/team-yaml/team.js')).default;
    expect(threadSettingsOf(fromYaml)).toEqual(threadSettingsOf(fromTs));
    expect(memberIds(fromYaml)).toEqual(memberIds(fromTs));
    expect(memberIds(fromYaml)).toEqual(['concierge', 'desk', 'ledger', 'partner', 'pyagent', 'specialist']);
    expect({ id: fromYaml.id, name: fromYaml.name, description: fromYaml.description }).toEqual({
      id: fromTs.id,
      name: fromTs.name,
      description: fromTs.description,
    });
    // The agent.yaml member runs here (built from its file); the others are the TS module's agents.
    expect(fromYaml.agents.map((a) => a.card.id).sort()).toEqual(['concierge', 'desk', 'ledger', 'specialist']);
    expect(fromYaml.remote).toEqual([{ id: 'partner', a2a: 'http://127.0.0.1:9/.well-known/agent-card.json' }]);
    expect(fromYaml.policy).toBeUndefined();
  });

  it('builds the LLM router from the router block', async () => {
    const file = teamFile(
      'router.yaml',
      [
        'id: routed',
        'name: Routed',
        'agents:',
        '  - id: a',
        '  - id: b',
        'router:',
        '  model: {provider: openai, name: router-model, base_url: "http://127.0.0.1:9/v1"}',
      ].join('\n'),
    );
    const team = await loadTeamYaml(file, { env: {} });
    expect(team.policy).toBeInstanceOf(LlmRouterPolicy);
    expect(threadSettingsOf(team).usePolicy).toBe(true);
  });

  it('throws CONFIG_INVALID with every problem, and when a module does not provide the ids it declares', async () => {
    const invalid = await loadTeamYaml(`${DIR}/invalid.yaml`, { env: ENV }).catch((e: unknown) => e);
    expect(invalid).toMatchObject({ code: 'CONFIG_INVALID' });
    expect(((invalid as TroupeError).details as { problems: unknown[] }).problems).toHaveLength(15);
    const file = teamFile(
      'module.yaml',
      `id: m\nname: M\nagents:\n  - module: ${join(process.cwd(), 'test/fixtures/yaml-peers.ts')}\n    ids: [ledger, bookkeeper]\n`,
    );
    const err = await loadTeamYaml(file, { env: ENV }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TroupeError);
    expect((err as TroupeError).message).toContain('provides ledger, specialist, desk, not bookkeeper');
  });

  it('loadModule (troupe up --team) takes a team.yaml', async () => {
    const file = teamFile(
      'up.yaml',
      `id: up\nname: Up\nagents:\n  - module: ${join(process.cwd(), 'test/fixtures/yaml-peers.ts')}\n  - id: outside\nentry: desk\n`,
    );
    const { team, agents } = await loadModule(file);
    expect(agents.map((a) => a.card.id)).toEqual(['ledger', 'specialist', 'desk']);
    expect(team?.members).toEqual(['outside']);
    expect(team?.config?.entryAgent).toBe('desk');
  });
});

describe('agent.yaml capabilities', () => {
  it('become the capabilities of the agent card the thread enforces', async () => {
    const file = teamFile(
      'capable.yaml',
      [
        'name: capable',
        'model: {provider: openai, name: m}',
        'instructions: {inline: Help.}',
        'capabilities:',
        '  handoff: {can_initiate: false, can_accept: true}',
        '  orchestration: {can_delegate: true, max_parallel: 2}',
      ].join('\n'),
    );
    const agent = await loadYamlAgent(file, { env: ENV });
    expect(agent.card.capabilities).toMatchObject({
      streaming: true,
      handoff: { canInitiate: false, canAccept: true },
      orchestration: { canDelegate: true, maxParallel: 2 },
    });
    const bad = teamFile(
      'incapable.yaml',
      'name: x\nmodel: {provider: openai, name: m}\ninstructions: {inline: Hi}\ncapabilities:\n  orchestration: {can_delegate: maybe}\n',
    );
    expect(validateAgentFile(bad, ENV).problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'capabilities.orchestration.can_delegate: must be true or false, not "maybe"',
    ]);
  });
});

describe('the example team', () => {
  it('examples/teams/team.yaml is valid and loads: YAML, TS and Python members, an LLM router', async () => {
    expect(validateTeamFile('examples/teams/team.yaml', ENV).problems).toEqual([]);
    const team = await loadTeamYaml('examples/teams/team.yaml', { env: ENV });
    expect(team.agents.map((a) => a.card.id)).toEqual(['support', 'billing']);
    expect(team.members).toEqual(['pyecho']);
    expect(team.policy).toBeInstanceOf(LlmRouterPolicy);
    expect(threadSettingsOf(team)).toMatchObject({ entryAgent: 'support', usePolicy: true, fallbackAgent: 'support', threshold: 0.6, maxHops: 6 });
  });
});

describe('troupe validate', () => {
  it(
    'prints the problems of a team.yaml and exits 2; a valid one exits 0 with a summary',
    async () => {
      const bad = await runTroupe(['validate', `${DIR}/invalid.yaml`], {});
      expect(bad.code).toBe(2);
      expect(bad.stdout).toContain(`${DIR}/invalid.yaml:11:8 entry: the entry agent "nobody" is not a member of the team`);
      expect(bad.stdout).toContain('15 problems');
      const good = await runTroupe(['validate', `${DIR}/team.yaml`], {});
      expect(good.code).toBe(0);
      expect(good.stdout).toContain('team shop, 4 members');
      const json = await runTroupe(['--json', 'validate', `${DIR}/team.yaml`], {});
      expect(JSON.parse(json.stdout)).toMatchObject({ kind: 'team', valid: true, problems: [], team: { id: 'shop' } });
      const agent = await runTroupe(['--json', 'validate', 'test/fixtures/yaml-agents/concierge/agent.yaml'], {});
      expect(JSON.parse(agent.stdout)).toMatchObject({ kind: 'agent', valid: true, agent: { name: 'concierge' } });
    },
    cliTestTimeout(4),
  );
});
