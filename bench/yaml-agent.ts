/**
 * What an agent declared in agent.yaml costs per turn beyond the model's own time (called from
 * bench/run.ts): full turns (TroupeClient.send -> thread -> agent -> user) over the bench's nats-server,
 * one at a time, alternating between
 *
 *   - a hand-written agent (defineAgent) that answers TEXT, and
 *   - a YAML agent (the same config an agent.yaml declares, built by createLlmAgent) whose model is a
 *     local OpenAI-compatible server answering TEXT at once, streamed in one chunk.
 *
 * The YAML turn includes everything Troupe adds — prompt and routing tools, the model-loop actor, the
 * SDK call, the streamed chunk on the thread's output — and the local HTTP round trip. The model time
 * (inside `provider.complete`, measured by the agent per turn) is subtracted for the headline ratio:
 *
 *   yamlAgentTurnVsHandwritten = p50(YAML turn − its model time) / p50(hand-written turn)
 *
 * and the ratio with the model call included is reported next to it. Tenant `yamlbench`: a plain node
 * (queue-group ingress, memory store), like the patterns; every role on its own connection.
 *
 *   BENCH_YAML_N (default 500) turns of each kind, after BENCH_YAML_WARMUP_N (default 50) of each.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { AgentConfigSchema } from '../src/config/agent.js';
import { createLlmAgent, type TurnStats } from '../src/llm/agent.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/index.js';
import { defineAgent } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import type { UserConnectOptions } from '../test/helpers/nats-server.js';
import { OpenAIScriptedServer } from '../test/helpers/model-servers.js';
import { summarize, type LatencyStats } from './measure.js';
import { formatRatio, formatUs, renderTable } from './table.js';

export interface YamlAgentBenchOptions {
  /** The demo node user (every role connects as it, on its own connection, as in bench/patterns.ts). */
  asNode: UserConnectOptions;
  tenant?: string;
  n?: number;
  warmupN?: number;
  timeoutMs?: number;
  log?: (text: string) => void;
}

export interface YamlAgentBenchResults {
  config: { tenant: string; n: number; warmupN: number; text: string };
  /** Full turns answered by the hand-written agent. */
  handwritten: LatencyStats & { errors: number; firstError?: string };
  /** Full turns answered by the YAML agent, model call included. */
  yaml: LatencyStats & { errors: number; firstError?: string };
  /** The YAML agent's time inside the model call (local server, answers at once), per turn. */
  yamlModel: LatencyStats;
  /** Each YAML turn minus its model time. */
  yamlExcludingModel: LatencyStats;
  ratio: {
    /** p50(YAML turn − model time) / p50(hand-written turn): the headline figure (target ≤ 1.2×). */
    excludingModelP50: number;
    excludingModelMean: number;
    /** p50(YAML turn) / p50(hand-written turn), the local model round trip included. */
    includingModelP50: number;
  };
}

const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
const HAND = 'handwritten';
const YAML = 'yamlagent';
const MODEL = 'bench-model';

export async function runYamlAgentBench(opts: YamlAgentBenchOptions): Promise<YamlAgentBenchResults> {
  const tenant = opts.tenant ?? 'yamlbench';
  const n = opts.n ?? 500;
  const warmupN = opts.warmupN ?? 50;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const log = opts.log ?? (() => undefined);
  const transports: NatsTransport[] = [];
  const connect = async (name: string) => {
    const t = await NatsTransport.connect({ ...opts.asNode, name });
    transports.push(t);
    return t;
  };
  const model = await new OpenAIScriptedServer().start();
  model.respondWith(() => ({ chunks: [TEXT] }));
  const dir = mkdtempSync(join(tmpdir(), 'troupe-yaml-bench-'));
  const hosts: AgentHost[] = [];
  let node: TroupeNode | undefined;
  try {
    log('yaml agent vs hand-written:');
    const handwritten = defineAgent({
      card: { id: HAND, name: 'Hand-written', description: 'Answers the benchmark text' },
      // Plain text, like the YAML agent's answer: neither names a recipient, so both take the same path.
      handle: () => TEXT,
    });
    const modelMs: number[] = [];
    const yaml = await createLlmAgent(
      {
        config: AgentConfigSchema.parse({
          name: YAML,
          description: 'Answers the benchmark text through a model',
          model: { provider: 'openai', name: MODEL, base_url: model.baseURL },
          instructions: { inline: 'Repeat the message back.' },
        }),
        file: 'bench/yaml-agent.ts',
        dir,
      },
      { env: {}, onTurn: (s: TurnStats) => modelMs.push(s.modelMs * 1_000) },
    );
    hosts.push(await new AgentHost({ transport: await connect('yamlbench-hand'), agent: handwritten, tenant }).start());
    hosts.push(await new AgentHost({ transport: await connect('yamlbench-yaml'), agent: yaml, tenant }).start());
    node = await new TroupeNode({ transport: await connect('yamlbench-node'), tenant, config: { entryAgent: HAND } }).start();
    await node.registry.waitFor([HAND, YAML]);
    const client = new TroupeClient(await connect('yamlbench-client'), tenant);

    const turn = async (agent: string, threadId: string) => {
      const res = await client.send(TEXT, { threadId, timeoutMs, metadata: { [CLIENT_ROUTING_URI]: { recipient: agent } } });
      if (res.error) throw new Error(`${agent}: ${res.error.code}: ${res.error.message}`);
      if (res.text !== TEXT) throw new Error(`${agent} answered "${res.text}"`);
    };
    const samples: Record<string, number[]> = { [HAND]: [], [YAML]: [] };
    const errors: Record<string, { count: number; first?: string }> = { [HAND]: { count: 0 }, [YAML]: { count: 0 } };
    const yamlTurns: Array<{ turnUs: number; modelUs: number }> = [];
    // One long-lived thread per agent, as a conversation would be; turns alternate to share any drift.
    const threads: Record<string, string> = { [HAND]: `yb-hand-${randomUUID()}`, [YAML]: `yb-yaml-${randomUUID()}` };
    for (let i = 0; i < warmupN + n; i++) {
      for (const agent of i % 2 ? [HAND, YAML] : [YAML, HAND]) {
        const before = modelMs.length;
        const start = process.hrtime.bigint();
        try {
          await turn(agent, threads[agent]!);
          const us = Number(process.hrtime.bigint() - start) / 1_000;
          if (i < warmupN) continue;
          samples[agent]!.push(us);
          if (agent === YAML && modelMs.length === before + 1) yamlTurns.push({ turnUs: us, modelUs: modelMs[before]! });
        } catch (err) {
          if (i < warmupN) continue;
          errors[agent]!.count++;
          errors[agent]!.first ??= err instanceof Error ? err.message : String(err);
        }
      }
      if (i === warmupN - 1) log(` warm-up ×${warmupN}… measuring ×${n}…`);
    }
    log(' done\n');
    const row = (agent: string) => ({
      ...summarize(samples[agent]!),
      errors: errors[agent]!.count,
      ...(errors[agent]!.first ? { firstError: errors[agent]!.first } : {}),
    });
    const hand = row(HAND);
    const yamlRow = row(YAML);
    const excluding = summarize(yamlTurns.map((t) => t.turnUs - t.modelUs));
    return {
      config: { tenant, n, warmupN, text: TEXT },
      handwritten: hand,
      yaml: yamlRow,
      yamlModel: summarize(yamlTurns.map((t) => t.modelUs)),
      yamlExcludingModel: excluding,
      ratio: {
        excludingModelP50: excluding.p50Us / hand.p50Us,
        excludingModelMean: excluding.meanUs / hand.meanUs,
        includingModelP50: yamlRow.p50Us / hand.p50Us,
      },
    };
  } finally {
    await Promise.all(hosts.map((h) => h.stop().catch(() => undefined)));
    await node?.stop().catch(() => undefined);
    await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
    await model.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function renderYamlAgentReport(r: YamlAgentBenchResults): string {
  const rows = [
    ['hand-written agent (defineAgent), full turn', r.handwritten, '1.00×'],
    ['YAML agent, full turn (local model answers at once)', r.yaml, formatRatio(r.ratio.includingModelP50)],
    ['  of which inside the model call', r.yamlModel, ''],
    ['YAML agent, full turn minus model time', r.yamlExcludingModel, formatRatio(r.ratio.excludingModelP50)],
  ] as const;
  const table = renderTable(
    ['turn', 'p50', 'p99', 'mean', 'vs hand-written (p50)', 'errors'],
    rows.map(([name, s, ratio]) => [name, formatUs(s.p50Us), formatUs(s.p99Us), formatUs(s.meanUs), ratio, 'errors' in s ? String(s.errors) : '']),
    ['left', 'right', 'right', 'right', 'right', 'right'],
  );
  return [
    `Agents from agent.yaml — tenant ${r.config.tenant} (plain node over NATS), ${r.config.n} turns of each after ${r.config.warmupN} warm-up, alternating`,
    '',
    table,
    '',
    `yamlAgentTurnVsHandwritten = p50(YAML turn − model time) / p50(hand-written turn) = ${formatRatio(r.ratio.excludingModelP50)} ` +
      `(means: ${formatRatio(r.ratio.excludingModelMean)}; target ≤ 1.20×)`,
  ].join('\n');
}
