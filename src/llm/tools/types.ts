/** A tool the model can call: its definition (name, description, JSON Schema) and how to run it. */
import type { ToolDefinition } from '../../model/types.js';

export interface ToolRunContext {
  signal: AbortSignal;
  threadId: string;
  agentId: string;
}

export interface RunnableTool {
  definition: ToolDefinition;
  /** The agent.yaml tool it comes from, when that is not `definition.name` (an MCP server's tools). */
  source?: string;
  /** Its own timeout, when the agent.yaml gives one. */
  timeoutMs?: number;
  /** Runs one call with arguments already validated; the result goes to the model as text. */
  run(args: Record<string, unknown>, ctx: ToolRunContext): Promise<string>;
}

/** Tool output beyond this many characters is cut (the model's context is finite). */
const MAX_TOOL_RESULT_CHARS = 100_000;

export function toResultText(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value ?? null) ?? 'null');
  return text.length > MAX_TOOL_RESULT_CHARS ? `${text.slice(0, MAX_TOOL_RESULT_CHARS)}… [cut at ${MAX_TOOL_RESULT_CHARS} characters]` : text;
}
