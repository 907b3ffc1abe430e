/** The demo researcher agent on its own: `troupe agent examples/agents/researcher.ts --nats <url>`. */
export { researcher as default } from 'troupe/demo';
