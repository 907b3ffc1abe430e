/**
 * Traces: W3C trace context on the wire (`traceparent` in NATS headers), spans through
 * `@opentelemetry/api`, exported by the OpenTelemetry SDK over OTLP/HTTP (JSON) when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
 *
 * Off by default, and then nearly free: no provider is registered, the SDK is not even loaded, and every
 * helper here returns at once on one boolean (`tracing.on`) — no span objects, no header parsing. Hosts
 * check `tracing.on` before building attributes.
 *
 * Spans (names are stable; docs/observability.md lists them with their attributes):
 *   troupe.send (client) → troupe.turn (node) → troupe.route (router policy decision)
 *                                             → troupe.hop (one step of the turn) → troupe.agent.call (one attempt)
 *                                                 → troupe.agent.handle (agent process) → troupe.model.call, troupe.tool.call
 */
import { SpanKind, SpanStatusCode, context, propagation, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';

export type { Attributes, Context, Span };
export { SpanKind };

const TRACER = 'troupe';

/** Whether a provider is registered by this module (checked on hot paths before any tracing work). */
export const tracing = { on: false };

export interface TracingHandle {
  /** Exports the spans ended so far now. */
  flush(): Promise<void>;
  /** Flushes the spans still buffered and stops exporting. */
  shutdown(): Promise<void>;
}

/**
 * Registers the SDK (tracer provider, async context, W3C propagator) when an OTLP endpoint is set in
 * `env`; otherwise does nothing and returns undefined. Call once per process, before work starts.
 */
export async function startTracing(opts: { serviceName: string; env?: NodeJS.ProcessEnv }): Promise<TracingHandle | undefined> {
  const env = opts.env ?? process.env;
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!tracesEndpoint && !base) return undefined;
  if (tracing.on) throw new Error('tracing is already started in this process');
  const url = tracesEndpoint ?? `${base!.replace(/\/+$/, '')}/v1/traces`;
  // Loaded only when tracing is on: a process without an endpoint never pays for the SDK.
  const [
    { TracerProvider, BatchSpanProcessor },
    { OTLPTraceExporter },
    { resourceFromAttributes },
    { AsyncLocalStorageContextManager },
    { W3CTraceContextPropagator },
  ] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
  ]);
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME ?? opts.serviceName }),
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url }), scheduledDelayMillis: 500 })],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  tracing.on = true;
  return {
    flush: () => provider.forceFlush(),
    shutdown: async () => {
      tracing.on = false;
      await provider.shutdown().catch(() => undefined);
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}

/**
 * For a process that registers its own OpenTelemetry SDK (tracer provider, context manager, W3C
 * propagator) instead of calling `startTracing`: Troupe then makes its spans with that SDK. Without
 * this (or `startTracing`) Troupe makes none, whatever is registered.
 */
export function useGlobalTracing(on = true): void {
  tracing.on = on;
}

/** The context a message's headers carry (its `traceparent`), or the active one without. Only when on. */
export function contextFromHeaders(headers: Record<string, string>): Context {
  return propagation.extract(context.active(), headers);
}

/** Adds `traceparent` for the span (or context) to outgoing headers. Only when on. */
export function injectTraceparent(headers: Record<string, string>, parent: Span | Context): Record<string, string> {
  const ctx = isSpan(parent) ? trace.setSpan(context.active(), parent) : parent;
  propagation.inject(ctx, headers);
  return headers;
}

/** Starts a span under `parent` (a span, a context, or the active context). Only when on. */
export function startSpan(name: string, opts: { parent?: Span | Context; kind?: SpanKind; attributes?: Attributes } = {}): Span {
  const parentCtx = opts.parent === undefined ? context.active() : isSpan(opts.parent) ? trace.setSpan(context.active(), opts.parent) : opts.parent;
  return trace
    .getTracer(TRACER)
    .startSpan(name, { ...(opts.kind !== undefined ? { kind: opts.kind } : {}), ...(opts.attributes ? { attributes: opts.attributes } : {}) }, parentCtx);
}

/** Runs `fn` with `span` active, so spans and log lines inside it belong to it. */
export function withSpan<T>(span: Span, fn: () => T): T {
  return context.with(trace.setSpan(context.active(), span), fn);
}

/** Runs `fn` in `ctx` (e.g. the context a request's headers carry). */
export function runInContext<T>(ctx: Context, fn: () => T): T {
  return context.with(ctx, fn);
}

/** Ends a span, as an error with its Troupe code when one is given. */
export function endSpan(span: Span, error?: { code: string; message: string }): void {
  if (error) markError(span, error);
  span.end();
}

/** Records a Troupe error on a span: status ERROR, the code as `troupe.error.code`, an exception event. */
export function markError(span: Span, error: { code: string; message: string }): void {
  span.setAttribute('troupe.error.code', error.code);
  span.recordException({ name: error.code, message: error.message });
  span.setStatus({ code: SpanStatusCode.ERROR, message: `${error.code}: ${error.message}`.slice(0, 500) });
}

/** Trace and span id of the active span, for log lines (empty when off or outside a span). */
export function activeTraceIds(): { traceId: string; spanId: string } | undefined {
  if (!tracing.on) return undefined;
  const ctx = trace.getActiveSpan()?.spanContext();
  return ctx && ctx.traceId !== '00000000000000000000000000000000' ? { traceId: ctx.traceId, spanId: ctx.spanId } : undefined;
}

/** The trace id of a span, for log lines. */
export function traceIdOf(span: Span | undefined): string | undefined {
  return span?.spanContext().traceId;
}

function isSpan(x: Span | Context): x is Span {
  return typeof (x as Span).spanContext === 'function';
}

/** The active context (to parent spans made later, outside it). Only when on. */
export function activeContext(): Context {
  return context.active();
}
