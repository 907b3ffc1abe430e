/** The A2A HTTP gateway: JSON-RPC 2.0 and SSE onto Troupe threads. */
export { startGateway, AGENT_CARD_PATHS, type Gateway, type GatewayOptions } from './server.js';
export { gatewayCard, skillsOfAgents, type GatewayCard, type GatewayCardOptions } from './card.js';
export { RPC_CODES, RpcError, type RpcErrorObject, type RpcResponse } from './rpc.js';
export { loadTokens } from './tokens.js';
