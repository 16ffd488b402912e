'use strict';
// End to end: the real Python server on a free loopback port, driven by the Node client.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { after, before, test } = require('node:test');
const assert = require('node:assert/strict');

const { WmClient, WmError, ToolExecutor, loadServiceConfig } = require('../client.js');

const REPO = path.resolve(__dirname, '..', '..', '..');
const SESSION = 'node-e2e';

function python() {
  if (process.env.WM_PYTHON) return process.env.WM_PYTHON;
  const venv = path.join(REPO, '.venv', 'bin', 'python');
  return fs.existsSync(venv) ? venv : 'python3';
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

let server;
let dataDir;
let client;
let serverLog = '';

before(async () => {
  const port = await freePort();
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wm-node-e2e-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('WM_')));
  server = spawn(python(), ['-m', 'wm_server'], {
    cwd: REPO,
    env: { ...env, WM_ADDRESS: `127.0.0.1:${port}`, WM_DATA_DIR: dataDir, WM_LLM_PROVIDER: 'offline' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  server.stdout.on('data', (chunk) => { serverLog += chunk; });
  server.stderr.on('data', (chunk) => { serverLog += chunk; });
  client = new WmClient(`127.0.0.1:${port}`);
  try {
    await client.waitForReady(30000);
  } catch (error) {
    throw new Error(`the server did not start: ${error.message}\n${serverLog}`);
  }
});

after(() => {
  if (client) client.close();
  if (server && server.exitCode === null) server.kill('SIGTERM');
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

test('the shared service config (wm_client package data) is the one the client loads', () => {
  const config = loadServiceConfig();
  const streaming = config.methodConfig.filter((entry) => !entry.retryPolicy);
  const names = streaming.flatMap((entry) => entry.name.map((n) => n.method)).sort();
  assert.deepEqual(names, ['Commit', 'Compact', 'WatchCommit']);
});

test('create, add a turn, commit to the terminal event, get the WM, assemble, search', async () => {
  const session = await client.createSession(SESSION);
  assert.equal(session.session_id, SESSION);

  const added = await client.addMessages(SESSION, [
    { id: 'u1', role: 'ROLE_USER', parts: [{ text: 'The test suite fails: please fix src/app/settings.py' }] },
    {
      id: 'a1',
      role: 'ROLE_ASSISTANT',
      parts: [
        { text: 'Running the tests first.' },
        { tool_use: { id: 'toolu_01', name: 'bash', input_json: JSON.stringify({ command: 'pytest -q' }) } },
      ],
    },
    {
      id: 'u2',
      role: 'ROLE_USER',
      parts: [{ tool_result: { tool_use_id: 'toolu_01', content: "ModuleNotFoundError: No module named 'yaml'", is_error: true } }],
    },
    { id: 'a2', role: 'ROLE_ASSISTANT', parts: [{ text: 'PyYAML is missing from requirements.txt; adding it.' }] },
  ]);
  assert.deepEqual(added.added_message_ids, ['u1', 'a1', 'u2', 'a2']);
  assert.equal(added.message_count, 4);
  assert.ok(added.pending_tokens > 0);

  const events = [];
  for await (const event of client.commit(SESSION, 0)) events.push(event);
  assert.deepEqual(events.map((e) => e.sequence), events.map((_, i) => i + 1));
  assert.equal(events[0].stage, 'COMMIT_STAGE_ARCHIVED');
  assert.equal(events[0].phase1.archive_id, 'archive_001');
  assert.equal(events[0].phase1.archived_message_count, 4);
  assert.equal(events.filter((e) => e.terminal).length, 1);
  const last = events[events.length - 1];
  assert.equal(last.stage, 'COMMIT_STAGE_COMPLETED');
  assert.equal(last.detail, 'completed');
  assert.equal(last.completed.working_memory_version, 1);

  const memory = await client.getWorkingMemory(SESSION);
  assert.equal(memory.version, 1);
  assert.equal(memory.sections.length, 7);
  assert.match(memory.document, /## Files & Context/);
  assert.match(memory.document, /src\/app\/settings\.py/);

  const context = await client.assembleContext(SESSION, 8000, { includeAnthropicJson: true });
  assert.equal(context.working_memory_version, 1);
  assert.match(context.messages[0].parts[0].text, /^\[Session History Summary\]/);
  assert.equal(JSON.parse(context.anthropic_messages_json)[0].role, 'user');

  const found = await client.searchArchives('modulenotfounderror', { sessionId: SESSION });
  assert.equal(found.total_matches, 1);
  assert.equal(found.hits[0].archive_id, 'archive_001');
  assert.equal(found.hits[0].message_id, 'u2');
  assert.match(found.hits[0].snippet, /No module named 'yaml'/);

  const replay = [];
  for await (const event of client.watchCommit(SESSION, last.commit_id, { afterSequence: 1 })) replay.push(event);
  assert.deepEqual(replay.map((e) => e.sequence), events.slice(1).map((e) => e.sequence));
  const none = [];
  for await (const event of client.watchCommit(SESSION, last.commit_id, { afterSequence: last.sequence })) none.push(event);
  assert.deepEqual(none, []);
});

test('a session configured to commit itself: the server commits it, with its trigger', async () => {
  const id = `${SESSION}-auto`;
  const created = await client.createSession(id, {
    config: { auto_commit: { message_count_threshold: 3, keep_recent_count: 1 } },
  });
  assert.equal(created.config.auto_commit.message_count_threshold, 3);
  const answers = [];
  for (let i = 0; i < 3; i += 1) {
    answers.push(await client.addMessages(id, [{ id: `m${i}`, role: 'ROLE_USER', parts: [{ text: `note ${i}` }] }]));
  }
  assert.deepEqual(answers.map((a) => a.auto_commit_id !== ''), [false, false, true]);
  const commit = await client.getCommit(id, answers[2].auto_commit_id);
  assert.equal(commit.trigger, 'COMMIT_TRIGGER_MESSAGE_COUNT');
  const live = await client.listMessages(id);
  assert.deepEqual(live.messages.map((m) => m.id), ['m2']); // the auto commit kept one
  const updated = await client.updateSession(id, { auto_commit: { idle_timeout: { seconds: 600 } } }, [
    'config.auto_commit.idle_timeout',
  ]);
  assert.equal(Number(updated.config.auto_commit.idle_timeout.seconds), 600);
  assert.equal(updated.config.auto_commit.message_count_threshold, 3);
});

test('errors carry the code and the decoded details', async () => {
  await assert.rejects(client.getSession('nobody'), (error) => {
    assert.ok(error instanceof WmError);
    assert.equal(error.codeName, 'NOT_FOUND');
    assert.equal(error.reason, 'SESSION_NOT_FOUND');
    assert.equal(error.domain, 'wm.v1');
    assert.deepEqual(error.metadata, { session_id: 'nobody' });
    assert.match(error.requestId, /^[0-9a-f]{32}$/); // the server's id of the call, from the trailers
    return true;
  });
  await assert.rejects(client.addMessages(SESSION, [{ role: 'ROLE_USER', parts: [] }]), (error) => {
    assert.equal(error.codeName, 'INVALID_ARGUMENT');
    assert.deepEqual(error.fieldViolations.map((v) => v.field), ['messages[0].parts']);
    return true;
  });
});

test('a huge tool output: stored whole, read in pages, searched, run by the executor', async () => {
  const session = 'node-tools';
  const log = Array.from({ length: 5000 }, (_, n) => `line ${n}: ok`).join('\n') + '\nFATAL: quota exceeded\n';
  await client.addMessages(session, [
    { id: 'q1', role: 'ROLE_USER', parts: [{ text: 'Deploy, and remember the code word heliotrope' }] },
    { id: 'c1', role: 'ROLE_ASSISTANT', parts: [{ tool_use: { id: 't1', name: 'bash', input_json: '{}' } }] },
    { id: 'r1', role: 'ROLE_USER', parts: [{ tool_result: { tool_use_id: 't1', content: log } }] },
    { id: 'a1', role: 'ROLE_ASSISTANT', parts: [{ text: 'Quota exceeded.' }] },
    { id: 'q2', role: 'ROLE_USER', parts: [{ text: 'Now what?' }] },
    { id: 'a2', role: 'ROLE_ASSISTANT', parts: [{ text: 'Free some space.' }] },
  ], { createSessionIfMissing: true });

  const page = await client.getToolOutput(session, 'out.r1.0', { startLine: 5001, lineCount: 1 });
  assert.equal(page.content, 'FATAL: quota exceeded\n');
  assert.equal(page.output.line_count, 5001);
  const bytes = await client.getToolOutput(session, 'out.r1.0', { byteOffset: 0, byteLength: 10 });
  assert.equal(bytes.content, 'line 0: ok');
  const found = await client.searchToolOutputs(session, 'fatal');
  assert.deepEqual(found.hits.map((h) => [h.output_id, h.line]), [['out.r1.0', 5001]]);

  const events = [];
  for await (const event of client.commit(session, 0, { keepRecentTurns: 1 })) events.push(event);
  assert.equal(events[0].phase1.archived_message_count, 4); // the first turn; the newest is kept

  const archive = await client.getArchive(session, 'archive_001', { pageSize: 3 });
  assert.equal(archive.messages.length, 3);
  assert.deepEqual(archive.messages[2].tool_output_ids, ['out.r1.0']);
  const all = [];
  for await (const message of client.archiveMessages(session, 'archive_001', { pageSize: 3 })) all.push(message.id);
  assert.deepEqual(all, ['q1', 'c1', 'r1', 'a1']);

  const tools = new ToolExecutor(client, session, { maxChars: 1000, tools: ['archive_search', 'tool_output_read'] });
  const hit = await tools.run('archive_search', { query: 'HELIOTROPE' });
  assert.equal(hit.is_error, false);
  assert.match(hit.content, /archive_001, message q1 \(user\)/);
  const read = await tools.run('tool_output_read', JSON.stringify({ output_id: 'out.r1.0', start_line: 5001 }));
  assert.equal(read.content, 'out.r1.0: lines 5001-5001 of 5001\nFATAL: quota exceeded\n');
  const long = await tools.run('tool_output_read', { output_id: 'out.r1.0' });
  assert.ok(long.content.length <= 1000);
  assert.equal((await tools.run('archive_expand', { archive_id: 'archive_001' })).is_error, true); // not registered
  const missing = await tools.run('tool_output_read', { output_id: 'out.none.0' });
  assert.equal(missing.is_error, true);

  const context = await client.assembleContext(session, 100000, { registeredTools: tools.names });
  assert.match(context.system_prompt_addition, /archive_search/);
  assert.doesNotMatch(context.system_prompt_addition, /archive_expand/);
});
