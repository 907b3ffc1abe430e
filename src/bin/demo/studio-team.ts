/**
 * The studio's demo mesh: the demo team (triage → researcher → writer, streaming) with the handoff
 * specialists beside it, so one mesh shows routes, streaming and a handoff. Entry agent: triage; address
 * `main` to see a handoff ("build a skill").
 */
import { defineTeam } from '../../team/team.js';
import demoTeam, { researcher, triage, writer } from './team.js';
import { main, skills } from './handoff-team.js';

export const studioTeam = defineTeam({
  name: 'studio',
  agents: [triage, researcher, writer, main, skills],
  config: { ...demoTeam.config, entryAgent: 'triage', handoffMaxDurationMs: 10 * 60_000 },
});
