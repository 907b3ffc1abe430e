/**
 * A team mixing agents written three ways: `support` declared in YAML (model, instructions, tools),
 * `billing` in TypeScript, and the stdlib-only Python agent `pyecho`, which joins on its own.
 *
 *   troupe creds init && nats-server -c .troupe/server.conf &
 *   export TROUPE_NATS_URL=nats://127.0.0.1:4222 C=.troupe/creds/tenants/demo/users
 *   OPENAI_API_KEY=sk-... troupe up --team examples/yaml-agents/team.ts --creds $C/node.creds &
 *   python3 examples/python-agent/agent.py --creds $C/pyecho.creds &
 *   troupe send "Where is my order A-1001?" --creds $C/cli.creds
 *   troupe send "Order A-1003 never arrived, I want a refund" --creds $C/cli.creds
 *
 * The YAML agent needs a model: OPENAI_API_KEY, or OPENAI_BASE_URL for a local OpenAI-compatible server.
 */
import { fileURLToPath } from 'node:url';
import { defineTeam, loadYamlAgent } from 'troupe';
import billing from './billing.js';

const support = await loadYamlAgent(fileURLToPath(new URL('./support/agent.yaml', import.meta.url)));

export default defineTeam({
  name: 'yaml-support',
  agents: [support, billing],
  config: { entryAgent: 'support', maxHops: 6 },
});
