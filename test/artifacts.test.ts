/**
 * Streamed chunks are kept with the thread: they accumulate, by artifact id, into the stored Task's
 * artifacts (committed with the turn), bounded in count and size.
 */
import { describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { ARTIFACT_LIMITS, appendArtifact } from '../src/actors/threads/record.js';
import { silentLogger } from '../src/observability/logger.js';
import type { TaskArtifactUpdateEvent } from '../src/protocol/a2a.js';
import demoTeam from '../src/bin/demo/team.js';

const chunk = (artifactId: string, text: string, append = true): TaskArtifactUpdateEvent => ({
  kind: 'artifact-update',
  taskId: 't',
  contextId: 't',
  artifact: { artifactId, parts: [{ kind: 'text', text }] },
  append,
});

describe('artifacts', () => {
  it("a turn's streamed chunks are in the stored Task's artifacts, joined per artifact", async () => {
    const mesh = await startEmbedded(demoTeam, silentLogger());
    try {
      const res = await mesh.client.send('Write a short note about sea otters');
      const streamed = res.events
        .flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts : []))
        .map((p) => (p.kind === 'text' ? p.text : ''))
        .join('');
      expect(streamed.length).toBeGreaterThan(0);
      const task = await mesh.client.task(res.threadId);
      expect(task.artifacts).toHaveLength(1);
      expect(task.artifacts![0]!.parts).toEqual([{ kind: 'text', text: streamed }]);
      expect(task.artifacts![0]!.metadata?.['troupe/agent']).toBe('writer');
    } finally {
      await mesh.stop();
    }
  });

  it('appends by artifact id, replaces without append, cuts text past the cap and keeps the newest artifacts', () => {
    let a = appendArtifact([], chunk('x', 'he'));
    a = appendArtifact(a, chunk('x', 'llo'));
    expect(a).toEqual([{ artifactId: 'x', parts: [{ kind: 'text', text: 'hello' }] }]);
    a = appendArtifact(a, chunk('x', 'new', false));
    expect(a[0]!.parts).toEqual([{ kind: 'text', text: 'new' }]);
    a = appendArtifact(a, chunk('x', 'z'.repeat(ARTIFACT_LIMITS.textChars + 10)));
    expect((a[0]!.parts[0] as { text: string }).text).toHaveLength(ARTIFACT_LIMITS.textChars);
    expect(a[0]!.metadata?.['troupe/truncated']).toBe(true);
    for (let i = 0; i < ARTIFACT_LIMITS.count + 5; i++) a = appendArtifact(a, chunk(`a${i}`, 'x'));
    expect(a).toHaveLength(ARTIFACT_LIMITS.count);
    expect(a.at(-1)!.artifactId).toBe(`a${ARTIFACT_LIMITS.count + 4}`);
  });
});
