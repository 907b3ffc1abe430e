#!/usr/bin/env node
/**
 * The `troupe` command table. Without a NATS URL (`--nats` or TROUPE_NATS_URL) commands run on an
 * in-process mesh with the demo team; with one, they talk to the mesh over NATS.
 *
 * Each command's implementation lives in `commands/` and is imported only when that command runs, so
 * `troupe --help` or `troupe ps` do not load the machines, the gateway or the SDKs of other commands.
 * Exit codes: 0 success, 1 the command ran and failed (an error, a turn that ended in an error), 2 bad
 * usage (unknown option, invalid value).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { int, resolveTenant } from './cli.js';
import { tuneHeap } from './heap.js';

tuneHeap();

// `troupe … | head` closes the pipe early: that is not an error.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

/** A command's examples, printed after its options by `--help` (test/cli-help.test.ts runs each one). */
function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`;
}

const program = new Command();
program
  .name('troupe')
  .description('Actor-model runtime for multi-agent systems: XState actors exchanging A2A messages over NATS')
  .addOption(new Option('--nats <urls>', 'NATS server URL(s), comma-separated; without it, an in-process mesh runs the demo team').env('TROUPE_NATS_URL'))
  .addOption(new Option('--user <user>', 'NATS user').env('TROUPE_NATS_USER'))
  .addOption(new Option('--password <password>', 'NATS password').env('TROUPE_NATS_PASSWORD'))
  .addOption(new Option('--creds <file>', 'NATS credentials file (from `troupe creds`)').env('TROUPE_NATS_CREDS'))
  .addOption(new Option('--tls-ca <file>', 'CA certificate to trust for tls:// NATS servers (from `troupe creds init --tls`)').env('TROUPE_NATS_TLS_CA'))
  .addOption(new Option('--tenant <tenant>', 'tenant (a NATS account); default: the tenant of --creds, else demo').env('TROUPE_TENANT'))
  .addOption(new Option('--log-level <level>', 'pino log level').env('TROUPE_LOG_LEVEL'))
  .option('--json', 'machine-readable output')
  .showHelpAfterError()
  // Usage errors (unknown option, bad value) exit 2; commander's own default is 1.
  .exitOverride((err) => {
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') process.exit(0);
    process.exit(2);
  });

program
  .command('up')
  .description('start a node (router + threads); without --nats, an in-process mesh with the demo team')
  .option('--team <file>', 'team.yaml or team module (default export defineTeam({...})); its agents run in this process')
  .option('--no-agents', 'with --team: use only its settings, run no agents here')
  .option(
    '--inspect',
    'publish inspection records from the start (troupe watch, troupe inspect --stately, the studio; switchable with troupe inspect --on/--off)',
  )
  .option('--idle <ms>', 'passivate threads idle this long (default 5 min): nothing of them stays in memory', int(1))
  .option(
    '--dormant <ms>',
    'stop the actors of threads at rest this long and keep their records in memory until --idle, or until its deadline for a thread in a handoff (0: actors stay until --idle)',
    int(0),
    30_000,
  )
  .option('--no-durable', 'with --nats: plain subscriptions instead of the JetStream inbound stream and partition leases')
  .option(
    '--partitions <n>',
    "thread partitions: the server's mapping (`troupe creds init --partitions`, 8-256); the node refuses to start when they differ",
    int(1, 1024),
    8,
  )
  .option(
    '--replicas <n>',
    'replicas of TROUPE_IN, TROUPE_DLQ, TROUPE_ANSWERED and the thread and lease buckets (3 on a 3-server cluster; default 1 when they are created; given, existing ones are scaled to it)',
    int(1, 5),
  )
  .option('--lease-ttl <ms>', 'how long a dead node keeps its partitions before another node takes over', int(500), 5_000)
  .option('--thread-ttl <ms>', 'drop threads not written for this long (bucket max age, set when the bucket is created)', int(1_000), 24 * 60 * 60_000)
  .option(
    '--setup-timeout <ms>',
    'how long each JetStream setup step keeps asking a cluster that does not answer yet (servers down, a leader election) before the node gives up',
    int(1_000),
    60_000,
  )
  .option(
    '--metrics-port <n>',
    'serve Prometheus metrics on GET /metrics, and the probes GET /healthz and GET /readyz, at this port (0: any free port)',
    int(0, 65_535),
  )
  .option('--metrics-host <host>', 'address the metrics port listens on', '127.0.0.1')
  .addHelpText(
    'after',
    examples(
      'troupe up',
      'troupe up --nats nats://127.0.0.1:4222 --creds .troupe/creds/tenants/demo/users/node.creds',
      'troupe up --team examples/yaml-agents/team.ts',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/up.js')).up(...(args as Parameters<typeof import('./commands/up.js').up>)));

program
  .command('agent [module]')
  .description('run an agent module (default export defineAgent({...})), an agent.yaml, or a remote A2A agent (--a2a), and join the mesh')
  .option('--a2a <card-url>', "join a remote A2A agent as a mesh member: its agent card's URL (or base URL)")
  .addOption(new Option('--token <token>', 'with --a2a: bearer token for the remote agent (never logged)').env('TROUPE_A2A_TOKEN'))
  .option('--id <id>', "with --a2a: the agent's id on the mesh (default: from the card's name)")
  .option('--timeout <ms>', 'with --a2a: longest one call to the remote agent may take', int(1))
  .option('--refresh <ms>', 'with --a2a: read the remote card again this often (an endpoint down at start is retried so); 0: never', int(0), 60_000)
  .option('--replicas <n>', 'instances in this process (they share the inbox queue group)', int(1, 64), 1)
  .option('--heartbeat <ms>', 'how often the card is announced; the registry drops the agent after 3 missed beats', int(100), 5_000)
  .option('--inspect', 'publish inspection records from the start (else a node or `troupe inspect --on` switches it)')
  .option(
    '--metrics-port <n>',
    'serve Prometheus metrics on GET /metrics, and the probes GET /healthz and GET /readyz, at this port (0: any free port)',
    int(0, 65_535),
  )
  .option('--metrics-host <host>', 'address the metrics port listens on', '127.0.0.1')
  .addHelpText(
    'after',
    examples(
      'troupe agent hello.ts --creds .troupe/creds/tenants/demo/users/hello.creds',
      'troupe agent examples/yaml-agents/support/agent.yaml --replicas 2',
      'troupe agent --a2a https://example.com/.well-known/agent-card.json --id partner',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/agent.js')).agent(...(args as Parameters<typeof import('./commands/agent.js').agent>)));

program
  .command('validate <file>')
  .description('check an agent.yaml or team.yaml: every problem with file:line:col and field path (exit 2 when there are any)')
  .addHelpText('after', examples('troupe validate examples/yaml-agents/support/agent.yaml', 'troupe validate examples/teams/team.yaml --json'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/validate.js')).validate(...(args as Parameters<typeof import('./commands/validate.js').validate>)),
  );

program
  .command('eval <file>')
  .description("run an agent.yaml's test cases through the agent and score them (case × metric table; exit 1 when a case fails)")
  .option('--case <name>', 'only this test case')
  .option('--timeout <ms>', 'how long one case may take', int(1), 300_000)
  .addHelpText(
    'after',
    examples('troupe eval examples/yaml-agents/support/agent.yaml', "troupe eval examples/yaml-agents/support/agent.yaml --case 'order status' --json"),
  )
  .action(async (...args: unknown[]) => (await import('./commands/eval.js')).evaluate(...(args as Parameters<typeof import('./commands/eval.js').evaluate>)));

program
  .command('send [text]')
  .description('send a message as the user; prints the streamed answer and the route it took (with --cancel: cancel a thread, the text its reason)')
  .option('--thread <id>', 'continue a thread (default: a new one)')
  .option('--to <agentId>', 'address an agent directly instead of the entry agent or the router')
  .option('--cancel', 'cancel the thread given with --thread instead of sending (ends its handoff; no text needed)')
  .option('--timeout <ms>', 'how long to wait for the answer', int(1), 60_000)
  .addHelpText(
    'after',
    examples(
      'troupe send "Write a short note about sea otters"',
      'troupe send "hello" --to echo',
      'troupe send "and in French?" --thread 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10',
      'troupe send --cancel --thread 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/send.js')).send(...(args as Parameters<typeof import('./commands/send.js').send>)));

for (const decision of ['approve', 'deny'] as const) {
  program
    .command(`${decision} <thread>`)
    .description(`${decision} the tool calls an agent of the thread waits on (a requires_approval tool); prints the agent's answer`)
    .option('--call <id>', 'only this call (default: every waiting call)')
    .option('--reason <text>', 'why, for the model')
    .option('--timeout <ms>', 'how long to wait for the answer', int(1), 60_000)
    .addOption(new Option('--args <json>', "approve with these arguments instead of the model's (a JSON object)").hideHelp(decision === 'deny'))
    .addHelpText(
      'after',
      decision === 'approve'
        ? examples(
            'troupe approve 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10',
            'troupe approve 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10 --call call_1 --args \'{"amount": 20}\'',
          )
        : examples('troupe deny 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10 --reason "refunds over 50 need a manager"'),
    )
    .action(async (thread: string, opts: unknown, cmd: Command) =>
      (await import('./commands/approve.js')).decideApproval(decision, thread, opts as import('./commands/approve.js').ApproveOptions, cmd),
    );
}

program
  .command('status')
  .description("is the tenant's mesh serving: NATS, the nodes and the partitions they own, the store, the agents (exit 1 when not)")
  .option('--window <ms>', 'how long to gather answers', int(10, 60_000), 500)
  .option('--partitions <n>', 'partitions the nodes should own between them (default: the count the nodes report)', int(1, 1024))
  .option('--streams', "also Troupe's streams and buckets: replicas, leader, replicas current (needs a node's credentials: the JetStream API)")
  .addHelpText(
    'after',
    examples(
      'troupe status --creds .troupe/creds/tenants/demo/users/operator.creds',
      'troupe status --streams --creds .troupe/creds/tenants/demo/users/node.creds',
    ),
  )
  .action(async (...args: unknown[]) =>
    (await import('./commands/inspection.js')).status(...(args as Parameters<typeof import('./commands/inspection.js').status>)),
  );

program
  .command('ps')
  .description('every live actor across the mesh (nodes, threads and their children, agents)')
  .option('--window <ms>', 'how long to gather answers', int(10, 60_000), 500)
  .addHelpText('after', examples('troupe ps --creds .troupe/creds/tenants/demo/users/operator.creds', 'troupe ps --json'))
  .action(async (...args: unknown[]) => (await import('./commands/inspection.js')).ps(...(args as Parameters<typeof import('./commands/inspection.js').ps>)));

program
  .command('inspect [actorId]')
  .description("one actor's state, context (redacted) and recent events; or switch (--on/--off), relay (--stately) or record (--record) the inspection stream")
  .option('--on', 'switch inspection on (every node, and agents through hello; with --thread: one thread)')
  .option('--off', 'switch inspection off (with --thread: for that thread)')
  .option('--thread <id>', 'with --on/--off/--stately/--record: only this thread')
  .option('--stately', 'relay the inspection stream to the Stately Inspector (prints the URL to open)')
  .option('--port <n>', 'with --stately: port of the relay', int(0, 65_535), 8089)
  .option('--host <host>', 'with --stately: address to listen on', '127.0.0.1')
  .option('--record <file>', 'append every inspection record to this file (JSON lines)')
  .addHelpText('after', examples('troupe inspect triage', 'troupe inspect --on', 'troupe inspect --stately', 'troupe inspect --record inspection.jsonl'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/observe.js')).inspectStream(...(args as Parameters<typeof import('./commands/observe.js').inspectStream>)),
  );

program
  .command('watch <target>')
  .description('follow a thread, an actor (<thread>/<child>) or an agent: each transition as `from → to (event)`; Ctrl-C to stop, or --count / --for')
  .option('--on', 'switch inspection on for it first (else says so when nothing publishes)')
  .option('--all', 'also show bookkeeping self-transitions (clock ticks, catalog updates)')
  .option('--count <n>', 'stop after showing this many records (exit 0)', int(1))
  .option('--for <ms>', 'stop after this long (exit 0; with --count, exit 1 if fewer records came)', int(1))
  .addHelpText(
    'after',
    examples(
      'troupe watch 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10 --on',
      'troupe watch triage --all',
      'troupe watch 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10 --count 3 --for 30000',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/observe.js')).watch(...(args as Parameters<typeof import('./commands/observe.js').watch>)));

program
  .command('replay <file>')
  .description('send a recording (troupe inspect --record) to a Stately relay, or with --studio to the studio')
  .option('--studio', 'replay into the studio instead of the Stately relay')
  .option('--port <n>', 'port (default 8089 for the relay, 8090 for the studio)', int(0, 65_535))
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .option(
    '--speed <x>',
    'keep the recorded gaps divided by x (0: all at once)',
    (v: string) => {
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0 || n > 1000) throw new InvalidArgumentError(`"${v}" is not a speed between 0 and 1000.`);
      return n;
    },
    0,
  )
  .addHelpText('after', examples('troupe replay inspection.jsonl --speed 2', 'troupe replay inspection.jsonl --studio'))
  .action(async (...args: unknown[]) => (await import('./commands/observe.js')).replay(...(args as Parameters<typeof import('./commands/observe.js').replay>)));

program
  .command('studio')
  .description('a local web UI: agents, threads, chat with streamed answers and routes, live statecharts; without --nats, an in-process demo mesh')
  .option('--port <n>', 'port to listen on (0: any free port)', int(0, 65_535), 8090)
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .option('--gateway <url>', 'with --nats: the A2A gateway the chat talks to (troupe gateway)')
  .addOption(
    new Option(
      '--gateway-token <token>',
      "with --gateway: the bearer token the chat sends (a user's token or JWT, for a gateway with --tokens or --jwt-issuer; never logged)",
    ).env('TROUPE_GATEWAY_TOKEN'),
  )
  .addHelpText(
    'after',
    examples(
      'troupe studio',
      'troupe studio --nats nats://127.0.0.1:4222 --creds .troupe/creds/tenants/demo/users/operator.creds --gateway http://127.0.0.1:8080',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/studio.js')).studio(...(args as Parameters<typeof import('./commands/studio.js').studio>)));

program
  .command('threads')
  .description('list persisted threads')
  .addOption(
    new Option('--state <state>', 'only threads in this task state').choices([
      'submitted',
      'working',
      'input-required',
      'completed',
      'canceled',
      'failed',
      'rejected',
    ]),
  )
  .option('--owner <owner>', 'only the threads of this owner: <principal> or <principal>/<user>')
  .option('--limit <n>', 'list at most this many', int(1, 10_000), 1_000)
  .addHelpText('after', examples('troupe threads --state input-required', 'troupe threads --owner cli --limit 20'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/inspection.js')).threads(...(args as Parameters<typeof import('./commands/inspection.js').threads>)),
  );

program
  .command('thread <id>')
  .description('show a persisted thread record (redacted)')
  .addHelpText('after', examples('troupe thread 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10 --json'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/inspection.js')).thread(...(args as Parameters<typeof import('./commands/inspection.js').thread>)),
  );

program
  .command('delete [id]')
  .description(
    'erase a thread for good: its record, its actor on whichever node holds it, its dead letters (refused while a turn is in flight); or every thread of an owner (--owner)',
  )
  .option('--owner <owner>', 'every thread of this owner: <principal> or <principal>/<user> (a gateway user: <gateway principal>/<user>)')
  .addHelpText('after', examples('troupe delete 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10', 'troupe delete --owner gateway/alice'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/inspection.js')).deleteThread(...(args as Parameters<typeof import('./commands/inspection.js').deleteThread>)),
  );

program
  .command('history <thread>')
  .description("a thread's checkpoints, one per committed turn (turn, time, state, route, answer); --diff a..b: what changed between two")
  .option('--diff <a..b>', 'what changed from checkpoint a to checkpoint b: messages added, state, context fields (--json: as data)')
  .addHelpText('after', examples('troupe history t-0193d2c1-7c1e-7b7a-9a51-2b7f4e8d9c10', 'troupe history t-0193d2c1-7c1e-7b7a-9a51-2b7f4e8d9c10 --diff 2..3'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/history.js')).history(...(args as Parameters<typeof import('./commands/history.js').history>)),
  );

program
  .command('fork <thread>')
  .description(
    'a new thread (a new context) whose state is a checkpoint of one of your threads; optionally continue it with a message, or replay the message that came next',
  )
  .requiredOption('--at <n>', 'the checkpoint to fork from (troupe history lists them)', int(1))
  .option('--message <text>', 'send this into the new thread and print the answer')
  .option('--replay', 'send the message that came after the checkpoint to the agents as they are now, and show both answers side by side')
  .option('--into <id>', 'the new thread id (default: a new one)')
  .option('--user <user>', "the user the thread belongs to (a gateway user: with the gateway principal's credentials)")
  .option('--timeout <ms>', 'how long to wait for the answer', int(1), 60_000)
  .addHelpText(
    'after',
    examples(
      'troupe fork t-0193d2c1-7c1e-7b7a-9a51-2b7f4e8d9c10 --at 2',
      'troupe fork t-0193d2c1-7c1e-7b7a-9a51-2b7f4e8d9c10 --at 2 --message "and in French?"',
      'troupe fork t-0193d2c1-7c1e-7b7a-9a51-2b7f4e8d9c10 --at 2 --replay',
    ),
  )
  .action(async (...args: unknown[]) => (await import('./commands/history.js')).fork(...(args as Parameters<typeof import('./commands/history.js').fork>)));

program
  .command('rehydrate <id>')
  .description('drop the live actor of a thread and reload it from the store')
  .addHelpText('after', examples('troupe rehydrate 6f1c2a7e-0d3b-4c55-9a61-2b7f4e8d9c10'))
  .action(async (...args: unknown[]) =>
    (await import('./commands/inspection.js')).rehydrate(...(args as Parameters<typeof import('./commands/inspection.js').rehydrate>)),
  );

program
  .command('dlq')
  .description('messages set aside after failing every attempt (the dead-letter stream), newest first')
  .option('--limit <n>', 'how many', int(1, 1000), 50)
  .addHelpText('after', examples('troupe dlq --limit 10'))
  .action(async (...args: unknown[]) => (await import('./commands/inspection.js')).dlq(...(args as Parameters<typeof import('./commands/inspection.js').dlq>)));

program
  .command('demo')
  .description('run the demo teams in-process and play scripted conversations (what `npm start` does)')
  .option('--llm', 'route with an LLM router and add a YAML agent scene (model from OPENAI_API_KEY or OPENAI_BASE_URL; TROUPE_DEMO_MODEL)')
  .addHelpText('after', examples('troupe demo', 'troupe demo --json'))
  .action(async (_opts: unknown, cmd: Command) => {
    const o = cmd.optsWithGlobals<{ json?: boolean; llm?: boolean }>();
    await (await import('./demo/run.js')).runDemo(Boolean(o.json), { llm: Boolean(o.llm) });
  });

program
  .command('gateway')
  .description('serve the mesh to A2A clients over HTTP; without --nats, an in-process mesh with the demo team')
  .option('--port <n>', 'port to listen on (0: any free port)', int(0, 65_535), 8080)
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .option('--tokens <file>', 'JSON {"<token>": {"tenant": "<tenant>", "user": "<user>"}}: requests then need Authorization: Bearer <token>')
  .option('--jwt-issuer <url>', 'also (or only) accept JWTs from this OpenID Connect issuer: signature checked against its keys, the user from `sub`')
  .option(
    '--jwt-audience <aud>',
    "with --jwt-issuer: the audience a token must carry (this gateway's client id or API identifier; comma-separated: any one of them)",
  )
  .option('--jwks-url <url>', "with --jwt-issuer: the issuer's keys (default: jwks_uri of its /.well-known/openid-configuration)")
  .option('--jwt-tenant-claim <claim>', 'with --jwt-issuer: the claim naming the tenant (default: every token is for --tenant)')
  .option('--jwt-user-claim <claim>', 'with --jwt-issuer: the claim naming the user', 'sub')
  .option('--public-url <url>', 'the URL clients reach the gateway at, for the agent card (behind a proxy)')
  .option('--max-body <bytes>', 'largest request body (larger: 413)', int(1024, 64 * 1024 * 1024))
  .option('--read-timeout <ms>', 'time a client has to send the headers, then the body, of a request (then 408; default 10000)', int(100, 600_000))
  .option('--turn-timeout <ms>', 'how long a turn may take before the gateway stops waiting', int(100))
  .option('--rate-limit <n>', 'requests per second per token (token bucket; over it: 429 with Retry-After)', int(1, 1_000_000))
  .option('--rate-burst <n>', 'with --rate-limit: requests a token may make at once', int(1, 1_000_000))
  .option('--tls-cert <file>', 'serve HTTPS with this certificate (PEM); needs --tls-key')
  .option('--tls-key <file>', 'the private key of --tls-cert (PEM)')
  .addOption(
    new Option('--operator-token <token>', 'enables diagnostics under /diagnostics for this bearer token (not a user token)').env('TROUPE_OPERATOR_TOKEN'),
  )
  .option('--operator-token-file <file>', 'the operator token, read from a file')
  .option('--operator-creds <file>', 'with --nats: operator NATS credentials for the diagnostics (troupe creds add-operator)')
  .option('--diagnostics-port <n>', 'serve diagnostics on their own port instead of under /diagnostics', int(0, 65_535))
  .addOption(
    new Option('--card-version <version>', 'the agent card for requests without an A2A-Version header (1.0 for the A2A TCK)')
      .choices(['0.3', '1.0'])
      .default('0.3'),
  )
  .option('--team <file>', 'without --nats: the team module the embedded mesh runs (default: the demo team)')
  .option(
    '--orchestrator-path <path>',
    "also serve JSON-RPC here in seed 003's orchestrator form (a Message answer, role assistant, agents_used …)",
    '/a2a/troupe',
  )
  .option(
    '--metrics-port <n>',
    'serve Prometheus metrics on GET /metrics, and the probes GET /healthz and GET /readyz, at this port (0: any free port)',
    int(0, 65_535),
  )
  .option('--metrics-host <host>', 'address the metrics port listens on', '127.0.0.1')
  .addHelpText(
    'after',
    examples(
      'troupe gateway',
      'troupe gateway --nats nats://127.0.0.1:4222 --creds .troupe/creds/tenants/demo/users/gateway.creds --tokens tokens.json --port 8080',
      'troupe gateway --team examples/tck/team.ts --card-version 1.0',
    ),
  )
  .action(async (...args: unknown[]) =>
    (await import('./commands/gateway.js')).gateway(...(args as Parameters<typeof import('./commands/gateway.js').gateway>)),
  );

program
  .command('graph <machine>')
  .description("print a machine's definition (thread, router, agent-call, agent, handoff, orchestration, llm-agent, llm-tool-call)")
  .addOption(new Option('--format <format>', 'json (imports into the Stately editor) or mermaid').choices(['json', 'mermaid']).default('json'))
  .addHelpText('after', examples('troupe graph handoff --format mermaid', 'troupe graph thread --format json'))
  .action(async (...args: unknown[]) => (await import('./commands/graph.js')).graph(...(args as Parameters<typeof import('./commands/graph.js').graph>)));

// `troupe creds …`: per-user NATS credentials (operator mode). Each subcommand takes --dir (the store).
type CredsCommands = typeof import('./commands/creds.js');
const credsAction =
  <K extends keyof CredsCommands>(name: K) =>
  async (...args: unknown[]) =>
    ((await import('./commands/creds.js'))[name] as (...a: unknown[]) => Promise<void>)(...args);
const credsDir = () => new Option('--dir <dir>', 'credential store directory').env('TROUPE_CREDS_DIR').default('.troupe');
const creds = program.command('creds').description('per-agent NATS credentials: create, list, revoke (NATS operator mode, no server restarts)');
creds
  .command('init')
  .description(
    'create the store: operator, one account per tenant, server.conf, creds for a node, an operator, the gateway, the client "cli" and the demo agents',
  )
  .addOption(credsDir())
  .option('--tenants <list>', 'tenants (NATS accounts), comma-separated', 'demo')
  .option('--partitions <n>', "ingress partitions per tenant (must match the nodes' --partitions)", int(1, 1024), 8)
  .option('--host <host>', 'address the server listens on', '127.0.0.1')
  .option('--port <n>', 'port the server listens on', int(1, 65_535), 4222)
  .option('--tls', 'make a CA and a server certificate and require TLS (clients: tls://… --tls-ca <dir>/tls/ca.pem)')
  .option('--tls-hosts <list>', 'with --tls: names and IPs in the server certificate (default localhost,127.0.0.1)')
  .option('--agents <list>', 'agents to make credentials for in each tenant (default: the demo agents)')
  .addHelpText('after', examples('troupe creds init', 'troupe creds init --tenants demo,acme --port 4333 --tls'))
  .action(credsAction('init'));
creds
  .command('add-agent <id>')
  .description('credentials for one more agent in --tenant')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds add-agent hello', 'troupe creds add-agent billing --tenant acme'))
  .action(credsAction('addAgent'));
creds
  .command('add-client <principal>')
  .description('credentials for a client principal in --tenant (its threads, answers and inbox _INBOX_<principal>)')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds add-client web'))
  .action(credsAction('addClient'));
creds
  .command('add-gateway [name]')
  .description('credentials for `troupe gateway` in --tenant: a client principal that may name its users (Troupe-User); named gateway or gateway-<name>')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds add-gateway gateway-web'))
  .action(credsAction('addGateway'));
creds
  .command('add-node [name]')
  .description('credentials for another node in --tenant (default name node-2, node-3, …)')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds add-node'))
  .action(credsAction('addNode'));
creds
  .command('add-operator [name]')
  .description('credentials for an operator in --tenant (ctl and inspection)')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds add-operator oncall'))
  .action(credsAction('addOperator'));
creds
  .command('list')
  .description('every user: name, role, tenant, public key, revoked')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds list --json'))
  .action(credsAction('listUsers'));
creds
  .command('revoke <name>')
  .description('revoke a user of --tenant and push the account to the server (--nats, default: the address in server.conf); it is disconnected at once')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds revoke hello'))
  .action(credsAction('revoke'));
creds
  .command('push')
  .description('send every account JWT to the server again (after it was down during a revoke)')
  .addOption(credsDir())
  .addHelpText('after', examples('troupe creds push'))
  .action(credsAction('push'));

program
  .command('cluster')
  .description('NATS clusters for development')
  .command('up')
  .description(
    'start a NATS cluster on this machine: one nats-server per --servers with routes and JetStream, the accounts of `troupe creds init` (made in --dir if absent); Ctrl-C stops it',
  )
  .addOption(new Option('--dir <dir>', 'credential store and cluster directory').default('.troupe-cluster'))
  .option('--servers <n>', 'servers in the cluster (3 tolerates one down)', int(1, 9), 3)
  .option('--port <n>', 'client port of the first server, the others follow (0: free ports)', int(0, 65_535), 0)
  .option('--cluster-port <n>', 'route port of the first server, the others follow (0: free ports)', int(0, 65_535), 0)
  .option('--partitions <n>', "with a new store: ingress partitions per tenant (8-256; the nodes' --partitions must match)", int(1, 1024), 8)
  .option('--tenants <list>', 'with a new store: tenants, comma-separated', 'demo')
  .option('--host <host>', 'address the servers listen on', '127.0.0.1')
  .option('--name <name>', 'cluster name', 'troupe')
  .addHelpText('after', examples('troupe cluster up --dir .troupe-cluster --partitions 64'))
  .action(async (...args: unknown[]) => ((await import('./commands/cluster.js')).up as (...a: unknown[]) => Promise<void>)(...args));

// The tenant, once the options are parsed: given, from the credentials, or demo (cli.ts resolveTenant).
program.hook('preAction', async (_program, action) => {
  // TROUPE_CLI_PARSE_ONLY=1: parse and check the command line, print what would run, run nothing (the
  // help examples' test parses every example this way, including those that need a server or a file).
  if (process.env.TROUPE_CLI_PARSE_ONLY === '1') {
    const path: string[] = [];
    for (let c: Command | null = action; c && c !== program; c = c.parent) path.unshift(c.name());
    process.stdout.write(`${JSON.stringify({ command: path.join(' '), args: action.args, options: Object.keys(action.optsWithGlobals()).sort() })}\n`);
    process.exit(0);
  }
  let top: Command = action;
  while (top.parent && top.parent !== program) top = top.parent;
  const g = program.opts<{ tenant?: string; creds?: string }>();
  program.setOptionValue('tenant', await resolveTenant(g, { fromCreds: top.name() !== 'creds' }));
});

program.parseAsync(process.argv).catch(async (err: unknown) => {
  const { reportError } = await import('./output.js');
  process.exitCode = reportError(err, process.argv.includes('--json'));
});
