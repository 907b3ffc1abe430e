/** `npm start`: demo teams on the embedded mesh, playing conversations that show routing, fan-out and handoff. */
import { startEmbedded } from '../../team/embedded.js';
import { silentLogger } from '../../observability/logger.js';
import type { TeamDefinition } from '../../team/team.js';
import { handoffTeam } from './handoff-team.js';
import qaTeam from './qa-team.js';
import demoTeam from './team.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { messageText, type ThreadEvent } from '../../protocol/index.js';
import { color, printJson } from '../output.js';

interface Step {
  title?: string;
  text: string;
  /** Steps with the same key share a thread. */
  thread?: string;
}

interface Scene {
  team: TeamDefinition;
  intro: string;
  steps: Step[];
}

const SCENES: Scene[] = [
  {
    team: demoTeam,
    intro: 'Team "demo" (triage, researcher, writer): agents name the next recipient with the client-routing extension',
    steps: [
      { title: 'A route through the team: triage → researcher → writer → user (writer streams)', text: 'Write a short note about sea otters' },
      { title: 'A `sender` return: researcher answers triage, which answers the user', text: 'Do sea otters hold hands while sleeping?' },
      { title: 'A loop between triage and writer, stopped by the hop limit', text: 'loop forever please' },
    ],
  },
  {
    team: qaTeam,
    intro: 'Team "qa" (weather, travel, billing): no entry agent, the scoring router picks with a confidence',
    steps: [
      {
        title: 'Orchestrated: two questions fan out in parallel and the answers are aggregated',
        text: "What's the weather in Paris and can you book me a flight there?",
      },
      { title: 'Partial failure: billing is down, the answer says so', text: 'Why was I charged twice, and will it be sunny in Rome?' },
      { title: 'Low confidence: the router asks instead of guessing', text: 'hmm, not sure' },
    ],
  },
  {
    team: handoffTeam,
    intro: 'Team "handoff" (main, skills): main hands the user to a specialist, which talks to them directly and returns',
    steps: [
      { title: 'main hands off to the skill builder', text: 'I want to create a skill', thread: 'h' },
      { title: 'The user talks to the specialist directly (streamed)', text: 'It should summarise my inbox', thread: 'h' },
      { title: "The specialist returns: its last answer, then main's with the result", text: "That's all, I'm done", thread: 'h' },
    ],
  },
];

function text(e: ThreadEvent): string {
  if (e.kind === 'artifact-update') return e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('');
  return messageText(e.status.message);
}

/** Where `--llm` takes its model from; the key stays with the SDK client. */
const LLM_ENV_HELP =
  'set OPENAI_API_KEY (and optionally TROUPE_DEMO_MODEL, default gpt-4o-mini), or OPENAI_BASE_URL for a local OpenAI-compatible server (Ollama, vLLM, llama.cpp)';

/**
 * `--llm`: the same scenes, the Q&A team routed by an LLM router (the model of the environment), and a
 * scene with the YAML support agent (examples/yaml-agents/support) answering with the same provider.
 */
async function llmScenes(): Promise<Scene[]> {
  const { createProvider } = await import('../../llm/providers/index.js');
  const { LlmRouterPolicy } = await import('../../routing/llm-policy.js');
  const { loadYamlAgent } = await import('../../team/team.js');
  const { fileURLToPath } = await import('node:url');
  const model = process.env.TROUPE_DEMO_MODEL?.trim() || 'gpt-4o-mini';
  const provider = createProvider(
    { provider: 'openai', name: model, temperature: 0.3, max_tokens: 500 },
    { where: 'the demo router (--llm)', timeoutMs: 30_000 },
  );
  // One model call per attempt: the thread retries up to its max attempts.
  const policy = new LlmRouterPolicy({ provider, maxAttempts: 1 });
  const support = await loadYamlAgent(fileURLToPath(new URL('../../../examples/yaml-agents/support/agent.yaml', import.meta.url)));
  return SCENES.map((scene) =>
    scene.team === qaTeam
      ? { ...scene, team: { ...qaTeam, policy }, intro: `Team "qa" (weather, travel, billing): the LLM router (${model}) picks with a confidence` }
      : scene,
  ).concat({
    team: { name: 'yaml', agents: [support], config: { entryAgent: 'support', retries: 0, agentTimeoutMs: 60_000 } },
    intro: 'Team "yaml": the support agent of examples/yaml-agents/support (agent.yaml: instructions, TS, Python and prompt tools)',
    steps: [{ title: 'A YAML agent answers with its model and tools', text: 'Where is my order A-1001?' }],
  });
}

export async function runDemo(json: boolean, opts: { llm?: boolean } = {}): Promise<void> {
  if (opts.llm && !process.env.OPENAI_API_KEY?.trim() && !process.env.OPENAI_BASE_URL?.trim()) {
    process.stderr.write(`${color.red('troupe demo --llm needs a model')}: ${LLM_ENV_HELP}\n`);
    process.exitCode = 2;
    return;
  }
  const scenes = opts.llm ? await llmScenes() : SCENES;
  const out: unknown[] = [];
  let n = 0;
  for (const scene of scenes) {
    const mesh = await startEmbedded(scene.team, silentLogger());
    const threads = new Map<string, string>();
    try {
      if (!json) process.stdout.write(`\n${color.bold(color.magenta(`▌ ${scene.intro}`))}\n`);
      for (const step of scene.steps) {
        n++;
        if (!json) process.stdout.write(`\n${color.bold(`${n}. ${step.title ?? ''}`)}\n${color.green('user')}: ${step.text}\n`);
        const threadId = step.thread ? (threads.get(step.thread) ?? `demo-${scene.team.name}-${step.thread}-${Date.now()}`) : undefined;
        if (step.thread && threadId) threads.set(step.thread, threadId);
        let streaming = false;
        const result = await mesh.client.send(step.text, {
          ...(threadId ? { threadId } : {}),
          onEvent: (e) => {
            if (json) return;
            if (e.kind === 'artifact-update') {
              if (!streaming) process.stdout.write(color.dim('  ⋯ streaming: '));
              streaming = true;
              process.stdout.write(color.cyan(text(e)));
              return;
            }
            if (streaming) process.stdout.write('\n');
            streaming = false;
            const route = e.metadata?.[META.route] as RouteStep | undefined;
            if (route) process.stdout.write(color.dim(`  ↳ hop ${route.hop}: ${route.from} → ${route.to}  (${route.reason})\n`));
            // An answer before the final one (a handoff's target, before its source takes the turn back).
            if (!e.final && e.status.message) process.stdout.write(`${color.bold(String(e.status.message.metadata?.[META.agent] ?? 'agent'))}: ${text(e)}\n`);
          },
        });
        const meta = result.final.status.message?.metadata ?? {};
        out.push({
          team: scene.team.name,
          text: step.text,
          answer: result.text,
          route: result.route,
          error: result.error,
          state: result.final.status.state,
          ...(meta.agentsUsed ? { agentsUsed: meta.agentsUsed, executionTimeMs: meta.executionTimeMs, taskState: meta.taskState } : {}),
        });
        if (json) continue;
        const from = String(meta[META.agent] ?? 'agent');
        process.stdout.write(`${color.bold(from)}: ${result.text.replace(/\n+/g, '\n    ')}\n`);
        if (result.error) process.stdout.write(`${color.red(`${result.error.code}`)}: ${result.error.message}\n`);
        const facts = [`route: ${result.route.map((s) => `${s.to}${s.confidence !== undefined ? ` (${s.confidence.toFixed(2)})` : ''}`).join(' → ') || '—'}`];
        if (meta.agentsUsed)
          facts.push(`agentsUsed ${JSON.stringify(meta.agentsUsed)}`, `${String(meta.executionTimeMs)} ms`, `taskState ${String(meta.taskState)}`);
        facts.push(`state ${result.final.status.state}`);
        process.stdout.write(color.dim(`  ${facts.join('  ·  ')}\n`));
      }
    } finally {
      await mesh.stop();
    }
  }
  if (json) printJson(out);
  else
    process.stdout.write(
      `\n${color.dim('Next: a mesh across processes on NATS — see README "Running on NATS". `troupe graph thread --format mermaid` draws the machines.')}\n`,
    );
}
