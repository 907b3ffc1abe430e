/**
 * Switching inspection at run time. Nodes answer `troupe.<t>.ctl.inspection` (operators publish it): the
 * switch changes, live actors are announced again, and each node answers with what it now inspects.
 *
 * Agents may not read ctl (src/security/roles.ts), so they learn it two ways the broker already allows:
 * - mesh-wide on/off rides on `troupe.<t>.hello`, which nodes and operators may publish and agents read:
 *   a node relays every mesh-wide switch there (and says it when it starts with `--inspect`);
 * - one inspected thread reaches an agent as the `Troupe-Inspect` header of that thread's calls, so the
 *   agent publishes for exactly those calls and needs no state.
 */
import { decode, encodeJson, TroupeError } from '../protocol/index.js';
import { HelloSchema, InspectionControlSchema, type Hello, type InspectionStateReply } from '../protocol/inspection.js';
import { subjects } from '../transport/subjects.js';
import type { InboundMessage, Transport } from '../transport/types.js';
import type { InspectionPublisher } from './inspection.js';

export interface InspectionControlTarget {
  publisher: InspectionPublisher;
  transport: Transport;
  tenant: string;
  node: string;
}

/** What this process inspects now, as it answers `ctl.inspection`. */
function inspectionState(target: Pick<InspectionControlTarget, 'publisher' | 'node'>): InspectionStateReply {
  return { kind: 'inspection', node: target.node, all: target.publisher.switch.all, threads: target.publisher.switch.threads };
}

/** Tells agents (through `hello`) to switch their own inspection. */
export function helloInspection(transport: Transport, tenant: string, on: boolean): void {
  if (transport.closed) return;
  const hello: Hello = { inspection: { on } };
  transport.publish(subjects.hello(tenant), encodeJson(hello));
}

/** A node's handler of `ctl.inspection`: `{}` asks, `{ on, threadId? }` switches. */
export function answerInspectionControl(msg: InboundMessage, target: InspectionControlTarget): void {
  try {
    const req = msg.data.length ? decode(InspectionControlSchema, msg.data, 'inspection request', 4096) : {};
    if (req.on !== undefined) {
      target.publisher.switch.set(req.on, req.threadId);
      if (req.on) target.publisher.announce(req.threadId);
      if (req.threadId === undefined) helloInspection(target.transport, target.tenant, req.on);
    }
    msg.respond(encodeJson(inspectionState(target)));
  } catch (err) {
    msg.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
  }
}

/** Reads a `hello` body; an empty or unreadable one is a plain "announce now". */
export function readHello(data: Uint8Array): Hello {
  if (!data.length) return {};
  try {
    return decode(HelloSchema, data, 'hello', 4096);
  } catch {
    return {};
  }
}
