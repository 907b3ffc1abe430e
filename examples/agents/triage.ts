/** The demo triage agent on its own: `troupe agent examples/agents/triage.ts --nats <url>`. */
export { triage as default } from 'troupe/demo';
