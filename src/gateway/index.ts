/** The A2A gateway: `@a2a-js/sdk`'s server side (A2A 1.0 and 0.3, JSON-RPC and REST) onto Troupe threads. */
export { startGateway, type Gateway, type GatewayOptions } from './server.js';
export { skillsOfAgents } from './card.js';
export { loadTokens, type Caller } from './tokens.js';
