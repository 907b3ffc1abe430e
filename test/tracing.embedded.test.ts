/**
 * Tracing in one process with an OpenTelemetry SDK set up by the application (`useGlobalTracing`): an
 * embedded mesh (MemoryBus) makes the same spans, with the same parents, into the application's own
 * exporter (the SDK's in-memory exporter); and with tracing off, the same turn makes none.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { useGlobalTracing } from '../src/observability/tracing.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { defineTeam } from '../src/team/team.js';

const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'Echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });

describe('tracing with an SDK the application registered', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;

  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(provider);
    mesh = await startEmbedded(defineTeam({ name: 'traced', agents: [echo] }), silentLogger());
  });

  afterAll(async () => {
    useGlobalTracing(false);
    await mesh?.stop();
    await provider.shutdown();
    trace.disable();
    propagation.disable();
    context.disable();
  });

  it('makes no spans while tracing is off, even with a provider registered', async () => {
    useGlobalTracing(false);
    const res = await mesh.client.send('quiet', { to: 'echo' });
    expect(res.text).toBe('echo: quiet');
    await provider.forceFlush();
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });

  it('makes the turn, hop, call and handle spans of one trace once switched on', async () => {
    useGlobalTracing(true);
    const res = await mesh.client.send('traced', { to: 'echo' });
    expect(res.text).toBe('echo: traced');
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const named = (name: string) => spans.filter((s) => s.name === name);
    const [send] = named('troupe.send');
    const [turn] = named('troupe.turn');
    const [hop] = named('troupe.hop');
    const [call] = named('troupe.agent.call');
    const [handle] = named('troupe.agent.handle');
    expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1);
    expect(turn!.parentSpanContext?.spanId).toBe(send!.spanContext().spanId);
    expect(hop!.parentSpanContext?.spanId).toBe(turn!.spanContext().spanId);
    expect(call!.parentSpanContext?.spanId).toBe(hop!.spanContext().spanId);
    expect(handle!.parentSpanContext?.spanId).toBe(call!.spanContext().spanId);
    expect(handle!.attributes['troupe.agent']).toBe('echo');
  });
});
