/**
 * `echo`: answers the user with `echo(<pid>): <text>`. The process id tells which replica (process)
 * answered, so a test can check that replicas in different processes share the load.
 *
 *   troupe agent examples/agents/echo.ts --nats <url> --creds .troupe/creds/tenants/demo/users/echo.creds
 */
import { defineAgent, reply } from 'troupe';

export default defineAgent({
  card: {
    id: 'echo',
    name: 'Echo',
    description: 'Repeats the message back to the user, tagged with the id of the process that answered',
    skills: [{ id: 'echo', name: 'Echo', description: 'Repeats you', tags: ['echo', 'test'], examples: ['hello'] }],
  },
  handle: (_message, ctx) => reply(`echo(${process.pid}): ${ctx.text}`, { to: 'user', reason: 'echoed' }),
});
