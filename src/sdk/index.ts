/** What agent authors and client applications import (re-exported by the package root). */
export { defineAgent, reply, type AgentContext, type AgentDefinition, type AgentHandler, type AgentResult, type ReplyOptions } from './agent.js';
export type { DelegateDirective, DelegationResults, DelegateResult } from '../protocol/delegation.js';
export { remoteAgent, type RemoteAgentOptions, type RemoteAgentRef } from './remote-agent.js';
export { TroupeClient, userMessage, textOfMessage, type SendOptions, type SendResult } from './client.js';
