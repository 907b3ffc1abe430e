/**
 * The tools of a YAML agent, run for real: TS/JS functions imported, Python functions in a python3
 * subprocess (JSON in, JSON out, killed when cancelled), arguments checked against the declared
 * parameters, prompt templates filled, and the routing tools that carry the model's choice of recipient.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { functionTool, runPythonFunction } from '../src/llm/tools/function.js';
import { parseArguments, parametersSchema } from '../src/llm/tools/parameters.js';
import { renderTemplate } from '../src/config/template.js';
import { routingTools } from '../src/llm/routing-tools.js';
import type { SimplifiedAgentCard } from '../src/protocol/routing.js';
import { TroupeError } from '../src/protocol/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'troupe-tools-'));
const PY = join(dir, 'tools.py');
writeFileSync(
  PY,
  [
    'import time',
    'def add(a, b):',
    '    print("adding", a, b)',
    '    return {"sum": a + b}',
    'async def later(x):',
    '    return x * 2',
    'def boom():',
    '    raise ValueError("no such order")',
    'def sleepy():',
    '    time.sleep(30)',
    '',
  ].join('\n'),
);
const TS = join(dir, 'tools.ts');
writeFileSync(TS, 'export function greet(args: { name: string }) { return `hello ${args.name}`; }\nexport const notAFunction = 1;\n');

afterAll(() => rmSync(dir, { recursive: true, force: true }));

const peer = (id: string): SimplifiedAgentCard => ({ id, name: id, description: `the ${id}`, capabilities: [], supportsClientRouting: true });
const signal = () => new AbortController().signal;

describe('python function tools', () => {
  it('returns the JSON result; what the tool prints does not get into it', async () => {
    expect(await runPythonFunction(PY, 'add', { a: 2, b: 3 }, signal())).toEqual({ sum: 5 });
    expect(await runPythonFunction(PY, 'later', { x: 21 }, signal())).toBe(42);
  });

  it('rejects with the Python error, and with a missing function', async () => {
    await expect(runPythonFunction(PY, 'boom', {}, signal())).rejects.toThrow('ValueError: no such order');
    await expect(runPythonFunction(PY, 'nope', {}, signal())).rejects.toThrow(`LookupError: ${PY} has no function nope`);
    await expect(runPythonFunction(PY, 'add', { a: 1 }, signal())).rejects.toThrow(/TypeError: .*missing 1 required positional argument: 'b'/);
  });

  it('is killed when the call is cancelled (timeout or agent stop)', async () => {
    const abort = new AbortController();
    const call = runPythonFunction(PY, 'sleepy', {}, abort.signal);
    abort.abort();
    await expect(call).rejects.toThrow('cancelled');
  });
});

describe('typescript function tools', () => {
  it('imports the module and calls the export with the arguments', async () => {
    const tool = await functionTool(
      {
        name: 'greet',
        description: 'Greets',
        type: 'function',
        file: 'tools.ts',
        function: 'greet',
        parameters: { name: { type: 'str', description: 'who' } },
      },
      dir,
      'test',
    );
    expect(tool.definition).toEqual({
      name: 'greet',
      description: 'Greets',
      parameters: { type: 'object', properties: { name: { type: 'string', description: 'who' } }, required: ['name'], additionalProperties: false },
    });
    expect(await tool.run({ name: 'Ada' }, { signal: signal(), threadId: 't', agentId: 'a' })).toBe('hello Ada');
  });

  it('refuses to start when the export is not a function', async () => {
    const err = await functionTool(
      { name: 'x', description: 'X', type: 'function', file: 'tools.ts', function: 'notAFunction' },
      dir,
      'agent.yaml tools[0] "x"',
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TroupeError);
    expect((err as TroupeError).message).toBe('agent.yaml tools[0] "x": tools.ts exports no function "notAFunction"');
  });
});

describe('arguments and templates', () => {
  const params = { order_id: { type: 'str' as const, description: 'id' }, qty: { type: 'int' as const, description: 'how many' } };

  it('checks the model arguments against the parameters and drops extra ones', () => {
    expect(parseArguments('{"order_id":"A-1","qty":2,"extra":true}', params)).toEqual({ order_id: 'A-1', qty: 2 });
    expect(() => parseArguments('{"order_id":', params)).toThrow('the arguments are not valid JSON: {"order_id":');
    expect(() => parseArguments('{"order_id":"A-1","qty":2.5}', params)).toThrow('invalid arguments: qty:');
    expect(() => parseArguments('[1]', params)).toThrow('the arguments must be a JSON object');
    expect(parseArguments('', undefined)).toEqual({});
    expect(parametersSchema(undefined)).toEqual({ type: 'object', properties: {}, required: [] });
  });

  it('fills {{placeholders}} and leaves unknown ones', () => {
    expect(renderTemplate('Dear {{ name }}, about {{order}}: {{missing}}', { name: 'Ada', order: { id: 1 } })).toBe('Dear Ada, about {"id":1}: {{missing}}');
  });
});

describe('routing tools', () => {
  it('offers route, handoff and delegate with the peers, not the agent itself', () => {
    const tools = routingTools({ self: 'front', sender: 'user', peers: [peer('front'), peer('billing'), peer('ledger')] });
    expect(tools.names).toEqual(['route', 'handoff', 'delegate']);
    const route = tools.definitions[0]!.parameters.properties.recipient as { enum: string[] };
    expect(route.enum).toEqual(['user', 'billing', 'ledger']);
  });

  it('offers nothing to an agent with no peers talking to the user, and sender when an agent asked', () => {
    expect(routingTools({ self: 'solo', sender: 'user', peers: [] }).names).toEqual([]);
    const asked = routingTools({ self: 'solo', sender: 'front', peers: [] });
    expect(asked.names).toEqual(['route']);
    expect((asked.definitions[0]!.parameters.properties.recipient as { enum: string[] }).enum).toEqual(['user', 'sender']);
  });

  it('records one decision; an invalid one or a second one is a tool error', () => {
    const tools = routingTools({ self: 'front', sender: 'user', peers: [peer('billing')] });
    expect(() => tools.run('route', '{"recipient":"front","reason":"me"}')).toThrow('invalid arguments: recipient: recipient must be one of user, billing');
    expect(tools.choice()).toBeUndefined();
    expect(tools.run('route', '{"recipient":"billing","reason":"money"}')).toBe(
      'Your answer will go to agent billing. Write it now, as a message to that agent.',
    );
    expect(() => tools.run('handoff', '{"target":"billing","context_summary":"x","reason":"y"}')).toThrow(
      'you already chose (route to billing); one routing decision per answer',
    );
    expect(tools.choice()).toEqual({ tool: 'route', to: 'billing', reason: 'money' });
  });

  it('turns a handoff call into a directive, and return_handoff into a return for the target', () => {
    const source = routingTools({ self: 'front', sender: 'user', peers: [peer('billing')] });
    source.run('handoff', '{"target":"billing","context_summary":"refund order 42","reason":"refunds"}');
    expect(source.choice()).toEqual({ tool: 'handoff', handoff: { targetAgentId: 'billing', contextSummary: 'refund order 42', handoffReason: 'refunds' } });

    const handoff = {
      threadId: 't',
      tenantId: 'demo',
      userId: 'user',
      sourceAgentId: 'front',
      targetAgentId: 'billing',
      contextSummary: 'refund',
      handoffReason: 'refunds',
      recentMessageCount: 5,
      preserveState: true,
      returnExpected: true,
    };
    const target = routingTools({ self: 'billing', sender: 'user', peers: [peer('front')], handoff });
    expect(target.names).toEqual(['route', 'return_handoff']);
    expect(() => target.run('handoff', '{}')).toThrow('no routing tool "handoff" is available now');
    target.run('return_handoff', '{"status":"completed","summary":"refunded"}');
    expect(target.choice()).toEqual({ tool: 'return_handoff', handoffReturn: { completionStatus: 'completed', resultSummary: 'refunded' } });
  });

  it('turns a delegate call into a delegation; invalid agents are tool errors; no delegate on the results', () => {
    const tools = routingTools({ self: 'front', sender: 'user', peers: [peer('billing'), peer('ledger')] });
    const agents = tools.definitions.find((d) => d.name === 'delegate')!.parameters.properties.agents as { items: { enum: string[] } };
    expect(agents.items.enum).toEqual(['billing', 'ledger']);
    expect(() => tools.run('delegate', '{"agents":["front"],"input":"x"}')).toThrow('each agent must be one of billing, ledger');
    expect(() => tools.run('delegate', '{"agents":["billing","billing"],"input":"x"}')).toThrow('name each agent once');
    expect(tools.run('delegate', '{"agents":["billing","ledger"],"input":"order 42?","strategy":"sequential"}')).toContain('billing, ledger will be asked');
    expect(tools.choice()).toEqual({ tool: 'delegate', delegate: { agents: ['billing', 'ledger'], input: 'order 42?', strategy: 'sequential' } });
    expect(routingTools({ self: 'front', sender: 'user', peers: [peer('billing')], delegationResults: true }).names).toEqual(['route', 'handoff']);
    // What the agent's card does not allow is not offered.
    expect(routingTools({ self: 'front', sender: 'user', peers: [peer('billing')], noHandoff: true, noDelegate: true }).names).toEqual(['route']);
  });
});
