/** The demo writer agent (streams its answer) on its own: `troupe agent examples/agents/writer.ts --nats <url>`. */
export { writer as default } from 'troupe/demo';
