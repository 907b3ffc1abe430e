/**
 * Troupe's public API: what an agent author, a client application or someone hosting the mesh in their
 * own process needs. Everything else is internal and may change without notice.
 */
// Writing agents and talking to the mesh.
export * from './sdk/index.js';
export { defineTeam, loadModule, loadTeamYaml, loadYamlAgent, threadSettingsOf, withRemoteAgents, type TeamDefinition, type TeamInput } from './team/team.js';

// Hosting the mesh in a process of your own.
export { TroupeNode, type NodeOptions } from './actors/node.js';
export { AgentHost, type AgentHostOptions } from './actors/agent-host.js';
export { startEmbedded } from './team/embedded.js';
export { NatsTransport, type NatsConnectOptions } from './transport/nats.js';
export { MemoryBus, MemoryTransport } from './transport/memory.js';
export type { Transport } from './transport/types.js';
export { KvThreadStore } from './store/kv.js';
export { MemoryThreadStore } from './store/memory.js';
export type { ThreadStore } from './store/types.js';
export { startGateway } from './gateway/index.js';
export { createLogger } from './observability/logger.js';
// Traces (OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set) and Prometheus metrics of an embedding process.
export { startTracing, useGlobalTracing, type TracingHandle } from './observability/tracing.js';
export { serveMetrics, type MetricsServer } from './observability/metrics.js';
export { Readiness, natsCheck, type Check, type CheckResult, type ReadinessReport } from './observability/probes.js';

// Router policies.
export { ScoringPolicy } from './routing/scoring.js';
export type { RouterPolicy, RouterPolicyInput } from './routing/policy.js';
export { LlmRouterPolicy, type LlmRouterPolicyOptions } from './routing/llm-policy.js';
export { DEFAULT_ROUTER_PROMPTS, type RouterPrompts } from './config/router-prompts.js';
export { modelSynthesizer, DEFAULT_SYNTHESIS_PROMPT, type Synthesizer } from './llm/synthesis.js';
// The model an LLM router or a synthesizer asks: a model block (openai, azure_openai, anthropic) and keys from the environment.
export { createProvider, type ProviderOptions } from './llm/providers/index.js';
export type { ModelProvider } from './model/types.js';
export type { ModelConfig } from './config/agent.js';
export { validateTeamFile, loadTeamConfig, type TeamConfig } from './config/team.js';
export type { ThreadConfig, RouteStep } from './machines/thread.js';

// What a vectorstore tool returns.
export type { SearchResult } from './llm/vectorstore/types.js';

// The wire: errors and the A2A types an agent sees.
export { TroupeError, ERROR_CODES, type ErrorCode, type ErrorBody } from './protocol/errors.js';
export { CLIENT_ROUTING_URI, USER, SENDER, type SimplifiedAgentCard } from './protocol/routing.js';
export { META, RESULT_META } from './protocol/metadata.js';
export type { AgentCard, Message, Part, Task, TaskState, ThreadEvent } from './protocol/a2a.js';
