/** The demo teams of `npm start`, importable as `troupe/demo` (the examples reuse their agents). */
export { default as demoTeam, triage, researcher, writer } from './team.js';
export { default as qaTeam, weather, travel, billing } from './qa-team.js';
export { handoffTeam, main, skills, crashy, picky, sloth } from './handoff-team.js';
