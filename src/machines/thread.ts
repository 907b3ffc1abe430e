/**
 * The thread machine: what the rest of Troupe uses of it (hosts, the CLI, the SDK's team config).
 * The pieces live in ./thread/ by concern.
 */
export { threadMachine, taskStateOf } from './thread/machine.js';
export { threadSetup } from './thread/routing.js';
export { userOf } from './thread/messages.js';
export {
  DEFAULT_THREAD_CONFIG,
  type RouteStep,
  type ThreadConfig,
  type ThreadContext,
  type ThreadEvent,
  type ThreadHandoff,
  type ThreadInput,
  type ThreadStatusEmitted,
  type Turn,
  type SynthesisInput,
  type SynthesisOutput,
} from './thread/types.js';
