/** The A2A gateway: `@a2a-js/sdk`'s server side (A2A 1.0 and 0.3, JSON-RPC and REST) onto Troupe threads. */
export { startGateway, AGENT_CARD_PATHS, type Gateway, type GatewayOptions } from './server.js';
export { gatewayCard, skillsOfAgents, REST_PATH, type GatewayCardOptions } from './card.js';
export { loadTokens, BearerTokens, type Caller, type TokenEntries } from './tokens.js';
export { RESULT_META, SEED_RESULT_META } from '../protocol/metadata.js';
export { DEFAULT_ORCHESTRATOR_PATH } from './orchestrator-api.js';
export { contextTaskId } from './handler.js';
export type { RateLimitOptions } from './rate-limit.js';
export type { PushDeliveryOptions } from './push.js';
