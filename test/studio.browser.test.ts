/**
 * The studio in a real browser: Debian's Chromium driven by playwright-core, against the studio server
 * on an in-process mesh (the demo agents, the handoff specialists and a `gate` agent that streams, then
 * waits until the test opens it, so "working" can be seen before "input-required" without racing), and a
 * YAML agent whose tool waits for a person's approval (its model a local OpenAI-compatible server).
 * Screenshots go to .tmp/ for people to look at.
 *
 * Chromium is required, never skipped: `apt-get install -y chromium` (CI does it in .ci/run), or point
 * TROUPE_CHROMIUM at another Chromium binary.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { studioTeam } from '../src/bin/demo/studio-team.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbeddedStudio, type EmbeddedStudio } from '../src/studio/embedded.js';
import { REPO_ROOT } from './helpers/nats-server.js';
import { loadYamlAgent } from '../src/llm/agent.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';

const CHROMIUM = process.env.TROUPE_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = join(REPO_ROOT, '.tmp');

let openGate!: () => void;
const gateOpened = new Promise<void>((resolve) => (openGate = resolve));
const gate = defineAgent({
  card: { id: 'gate', name: 'Gate', description: 'Streams, then answers when the test opens the gate', capabilities: { streaming: true } },
  async *handle() {
    yield 'Waiting for the gate… ';
    await gateOpened;
    return reply('The gate opened.', { to: 'user' });
  },
});

const openai = new OpenAIScriptedServer();
/** Where the teller's agent.yaml and tool live; the tool writes each refund it makes to ledger.txt. */
let tellerDir: string;
const ledger = () => (existsSync(join(tellerDir, 'ledger.txt')) ? readFileSync(join(tellerDir, 'ledger.txt'), 'utf8') : '');
const lastToolResult = (req: SeenRequest) => (req.body.messages as Array<{ role: string; content: string }>).at(-1);

let embedded: EmbeddedStudio;
let context: BrowserContext;
let page: Page;
let profile: string;

/** The thread the page shows (the app keeps it in the URL). */
const openThread = () => new URL(page.url()).searchParams.get('thread') ?? '';

/** The innermost highlighted states of an actor's chart. */
async function activeLeaves(actorId: string): Promise<Array<string | null>> {
  const leaves = page.locator(`svg[data-actor="${actorId}"] g.state.leaf`);
  return Promise.all(Array.from({ length: await leaves.count() }, (_, i) => leaves.nth(i).getAttribute('data-state')));
}

async function send(text: string, to = ''): Promise<void> {
  await page.selectOption('select[aria-label=recipient]', to);
  await page.fill('input[aria-label=message]', text);
  await page.click('form.composer button[type=submit]');
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM}: install it with \`apt-get install -y chromium\` (Debian), or set TROUPE_CHROMIUM to a Chromium binary. This suite never skips.`,
    );
  }
  mkdirSync(SHOTS, { recursive: true });
  await openai.start();
  tellerDir = mkdtempSync(join(tmpdir(), 'troupe-studio-teller-'));
  writeFileSync(
    join(tellerDir, 'tools.ts'),
    `import { appendFileSync } from 'node:fs';\nexport function refund(args: { order: number }) {\n  appendFileSync(${JSON.stringify(join(tellerDir, 'ledger.txt'))}, \`refund \${args.order}\\n\`);\n  return \`refunded order \${args.order}\`;\n}\n`,
  );
  writeFileSync(
    join(tellerDir, 'agent.yaml'),
    [
      'name: teller',
      'description: Refunds orders once a person approves',
      'model: { provider: openai, name: teller-model }',
      'instructions: { inline: You refund orders. }',
      'tools:',
      '  - name: refund',
      '    description: Refunds an order',
      '    type: function',
      '    file: tools.ts',
      '    function: refund',
      '    requires_approval: true',
      '    parameters:',
      '      order: { type: int, description: The order }',
      '',
    ].join('\n'),
  );
  const teller = await loadYamlAgent(join(tellerDir, 'agent.yaml'), { env: { OPENAI_API_KEY: 'sk-test', OPENAI_BASE_URL: openai.baseURL }, maxRetries: 0 });
  embedded = await startEmbeddedStudio({
    team: defineTeam({ name: 'studio-test', agents: [...studioTeam.agents, gate, teller], ...(studioTeam.config ? { config: studioTeam.config } : {}) }),
    port: 0,
  });
  profile = mkdtempSync(join(tmpdir(), 'troupe-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1500, height: 1000 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  await page.goto(embedded.studio.url);
});

afterAll(async () => {
  openGate?.();
  await context?.close().catch(() => undefined);
  await embedded?.stop();
  await openai.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
  if (tellerDir) rmSync(tellerDir, { recursive: true, force: true });
});

describe('troupe studio in Chromium', () => {
  it('lists the demo agents with their cards, replicas and state', async () => {
    for (const id of ['triage', 'researcher', 'writer', 'main', 'skills', 'gate']) await page.locator(`.agent-card[data-agent="${id}"]`).waitFor();
    const writer = page.locator('.agent-card[data-agent="writer"]');
    await expect(writer.textContent()).resolves.toContain('Writes the final answer for the user');
    await expect(writer.textContent()).resolves.toContain('1 replica');
    await expect(writer.locator('.badge').textContent()).resolves.toBe('idle');
    await page.screenshot({ path: join(SHOTS, 'studio-agents.png') });
  });

  it('sending a message streams the answer, with the route of the turn', async () => {
    await send('Write about otters');
    const answer = page.locator('[data-testid=answer]').last();
    await answer.waitFor();
    await expect(answer.textContent()).resolves.toContain('Here is your piece.');
    // The writer's words came as streamed chunks before the answer.
    expect(Number(await answer.getAttribute('data-chunks'))).toBeGreaterThanOrEqual(1);
    const steps = await page.locator('.turn').last().locator('.route-step .path strong').allTextContents();
    expect(steps).toEqual(['triage', 'researcher', 'writer']);
    // The gateway's task id is the thread's id: the thread list and its live chart carry it.
    expect(openThread()).toMatch(/^[A-Za-z0-9_-]+$/);
    await page.locator(`.threads li[data-thread="${openThread()}"]`).waitFor();
    await page.locator(`svg[data-actor="${openThread()}"] g.state.leaf[data-state="input-required"]`).waitFor();
  });

  it('the highlighted state of the thread moves from working to input-required', async () => {
    await send('Open the gate please', 'gate');
    // The gate streams, then holds the turn: the thread is working, its chart says so, the chunk is on screen.
    await page.locator('[data-testid=streaming]', { hasText: 'Waiting for the gate' }).waitFor();
    const threadId = openThread();
    await page.locator(`svg[data-actor="${threadId}"] g.state.leaf[data-state="working.calling"]`).waitFor();
    expect(await activeLeaves(threadId)).toEqual(['working.calling']);
    await expect(page.locator(`svg[data-actor="${threadId}"] g.state[data-state="working"]`).getAttribute('data-active')).resolves.toBe('true');
    await expect(page.locator(`svg[data-actor="${threadId}"] g.state[data-state="input-required"]`).getAttribute('data-active')).resolves.toBe('false');
    await page.screenshot({ path: join(SHOTS, 'studio-working.png') });
    openGate();
    await page.locator(`svg[data-actor="${threadId}"] g.state.leaf[data-state="input-required"]`).waitFor();
    expect(await activeLeaves(threadId)).toEqual(['input-required']);
    await expect(page.locator(`svg[data-actor="${threadId}"] g.state[data-state="working"]`).getAttribute('data-active')).resolves.toBe('false');
    await expect(page.locator('[data-testid=answer]').last().textContent()).resolves.toContain('The gate opened.');
  });

  it('a handoff shows on the route, and the handoff actor gets its own chart', async () => {
    await send('Please build a skill', 'main');
    const step = page.locator('.turn').last().locator('.route-step[data-kind="handoff"]');
    await step.waitFor();
    await expect(step.textContent()).resolves.toMatch(/main → skills.*handoff/);
    const threadId = openThread();
    await page.locator(`svg[data-actor="${threadId}/handoff"]`).waitFor();
    expect(await activeLeaves(`${threadId}/handoff`)).toEqual(['active']);
    // The inspector shows the redacted context and recent events of the actor picked.
    await page.locator(`figure[data-actor-id="${threadId}/handoff"] figcaption`).click();
    const inspect = page.locator('aside.inspect');
    await inspect.waitFor();
    await expect(inspect.locator('.context').textContent()).resolves.toContain('"targetAgentId": "skills"');
    await page.screenshot({ path: join(SHOTS, 'studio-handoff.png'), fullPage: true });
  });

  it(
    'a tool call waiting for approval shows its tool and arguments; Approve runs it, Deny refuses it, and the agent answers',
    { timeout: 90_000 },
    async () => {
      openai.scriptFor(
        'teller-model',
        { text: 'I can refund it once you agree.', toolCalls: [{ id: 'call_a', name: 'refund', arguments: { order: 42 } }] },
        { text: 'Refunded order 42.' },
        { toolCalls: [{ id: 'call_b', name: 'refund', arguments: { order: 7 } }] },
        { text: 'I did not refund order 7.' },
      );
      // A conversation of its own: the last one has a handoff open, which holds every message.
      await page.click('button.link:has-text("+ new")');
      await page.locator('section.chat h2', { hasText: 'New conversation' }).waitFor();
      await send('Refund order 42', 'teller');
      const pending = page.locator('[data-testid=approval]').last();
      await pending.waitFor();
      await expect(pending.getAttribute('data-agent')).resolves.toBe('teller');
      await expect(pending.locator('li[data-tool="refund"] .args').textContent()).resolves.toBe('{"order":42}');
      await expect(page.locator('[data-testid=turn-state]').last().textContent()).resolves.toBe('input-required');
      expect(ledger()).toBe('');
      await page.screenshot({ path: join(SHOTS, 'studio-approval.png') });

      await pending.locator('button[data-decision=approve]').click();
      await page.locator('[data-testid=answer]', { hasText: 'Refunded order 42.' }).waitFor();
      await expect(pending.locator('[data-testid=decided]').textContent()).resolves.toBe('approved');
      expect(ledger()).toBe('refund 42\n');
      expect(lastToolResult(openai.requestsFor('teller-model').at(-1)!)).toMatchObject({ role: 'tool', content: 'refunded order 42' });

      await send('Refund order 7 as well', 'teller');
      const second = page.locator('[data-testid=approval]').last();
      await second.locator('li[data-tool="refund"] .args', { hasText: '{"order":7}' }).waitFor();
      await second.locator('button[data-decision=deny]').click();
      await page.locator('[data-testid=answer]', { hasText: 'I did not refund order 7.' }).waitFor();
      await expect(second.locator('[data-testid=decided]').textContent()).resolves.toBe('denied');
      expect(ledger()).toBe('refund 42\n');
      expect(lastToolResult(openai.requestsFor('teller-model').at(-1)!)).toMatchObject({
        role: 'tool',
        content: JSON.stringify({ error: 'the user refused "refund"; it did not run' }),
      });
    },
  );
});
