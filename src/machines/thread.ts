/**
 * The thread machine: what the rest of Troupe uses of it (hosts, the CLI, the SDK's team config).
 * The pieces live in ./thread/ by concern.
 */
export { threadMachine, taskStateOf } from './thread/machine.js';
export {
  DEFAULT_THREAD_CONFIG,
  type RouteStep,
  type ThreadConfig,
  type ThreadContext,
  type ThreadStatusEmitted,
  type SynthesisInput,
  type SynthesisOutput,
} from './thread/types.js';
