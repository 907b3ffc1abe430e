/** The one place subject names are built. Tenants and ids are single subject tokens. */
const TOKEN = /^[A-Za-z0-9_-]+$/;

export const SUBJECT_PREFIX = 'troupe';

function token(kind: string, value: string): string {
  if (!TOKEN.test(value)) throw new Error(`invalid ${kind} "${value}": use A-Z, a-z, 0-9, _ and -`);
  return value;
}

export function isSubjectToken(value: string): boolean {
  return TOKEN.test(value);
}

export const subjects = {
  agentInbox: (tenant: string, agentId: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.agent.${token('agent id', agentId)}`,
  /** Queue group shared by replicas of one agent. */
  agentQueue: (agentId: string) => `agent-${agentId}`,
  threadIn: (tenant: string, threadId: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.thread.${token('thread id', threadId)}.in`,
  threadOut: (tenant: string, threadId: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.thread.${token('thread id', threadId)}.out`,
  allThreadsIn: (tenant: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.thread.*.in`,
  registry: (tenant: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.registry`,
  ctl: (tenant: string, verb: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.ctl.${token('verb', verb)}`,
  inspect: (tenant: string, actorId: string) => `${SUBJECT_PREFIX}.${token('tenant', tenant)}.inspect.${token('actor id', actorId)}`,
  /** Thread id out of a `...thread.<id>.in|out` subject. */
  threadIdOf: (subject: string): string | undefined => {
    const parts = subject.split('.');
    return parts[2] === 'thread' ? parts[3] : undefined;
  },
} as const;
