/** `npm start`: the demo team on the embedded mesh, playing conversations that show the routing. */
import { startEmbedded } from '../actors/embedded.js';
import { silentLogger } from '../actors/logger.js';
import demoTeam from '../demo/team.js';
import type { RouteStep } from '../machines/thread.js';
import { color, printJson } from './output.js';

const SCRIPT: Array<{ title: string; text: string }> = [
  { title: 'A route through the team: triage → researcher → writer → user (writer streams)', text: 'Write a short note about sea otters' },
  { title: 'A `sender` return: researcher answers triage, which answers the user', text: 'Do sea otters hold hands while sleeping?' },
  { title: 'A loop between triage and writer, stopped by the hop limit', text: 'loop forever please' },
];

export async function runDemo(json: boolean): Promise<void> {
  const mesh = await startEmbedded(demoTeam, silentLogger());
  const out: unknown[] = [];
  try {
    if (!json) {
      process.stdout.write(`${color.bold('Troupe demo')} — embedded mesh (in-memory transport), agents: ${demoTeam.agents.map((a) => a.card.id).join(', ')}\n`);
    }
    for (const [i, step] of SCRIPT.entries()) {
      if (!json) process.stdout.write(`\n${color.bold(`${i + 1}. ${step.title}`)}\n${color.green('user')}: ${step.text}\n`);
      let streaming = false;
      const result = await mesh.client.send(step.text, {
        onEvent: (e) => {
          if (json) return;
          if (e.kind === 'artifact-update') {
            if (!streaming) process.stdout.write(color.dim('  ⋯ streaming: '));
            streaming = true;
            process.stdout.write(color.cyan(e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('')));
            return;
          }
          if (streaming) process.stdout.write('\n');
          streaming = false;
          const route = e.metadata?.['troupe/route'] as RouteStep | undefined;
          if (route) process.stdout.write(color.dim(`  ↳ hop ${route.hop}: ${route.from} → ${route.to}  (${route.reason})\n`));
        },
      });
      out.push({ title: step.title, text: step.text, answer: result.text, route: result.route, error: result.error, state: result.final.status.state });
      if (json) continue;
      const from = String(result.final.status.message?.metadata?.['troupe/agent'] ?? 'agent');
      process.stdout.write(`${color.bold(from)}: ${result.text}\n`);
      if (result.error) process.stdout.write(`${color.red(`${result.error.code}`)}: ${result.error.message}\n`);
      process.stdout.write(color.dim(`  route: ${result.route.map((s) => s.to).join(' → ')}  ·  ${result.route.at(-1)?.hop ?? 0} hops  ·  state ${result.final.status.state}\n`));
    }
    if (json) printJson(out);
    else process.stdout.write(`\n${color.dim('Next: run a mesh across processes on NATS — see README "Running on NATS".')}\n`);
  } finally {
    await mesh.stop();
  }
}
