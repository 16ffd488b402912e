// The ContextEngine and the ToolExecutor against the real server, and the engine's fallback
// when the server is stopped (the last test: it stops the server and starts a new one).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  CommitStage,
  ContextEngine,
  ContextFormat,
  MEMORY_TOOLS,
  MemoryState,
  MemoryType,
  RECALL_TOOLS,
  Role,
  ToolExecutor,
  type WmClient,
  type Logger,
  type MessageInit,
} from "../src/index.js";
import { ServerProcess } from "./support.js";

const text = (id: string, role: Role, body: string): MessageInit => ({ id, role, parts: [{ kind: { case: "text", value: body } }] });

function turn(n: number, request: string, answer: string): MessageInit[] {
  return [text(`u${n}`, Role.USER, request), text(`a${n}`, Role.ASSISTANT, answer)];
}

class RecordingLogger implements Logger {
  readonly warnings: string[] = [];
  readonly notes: string[] = [];
  warn(message: string): void {
    this.warnings.push(message);
  }
  info(message: string): void {
    this.notes.push(message);
  }
}

describe("the context engine and the tool executor", () => {
  let server: ServerProcess;
  let client: WmClient;

  before(async () => {
    server = await new ServerProcess().start();
    client = server.client();
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("afterTurn commits in the background once pending tokens reach the threshold", async () => {
    const logger = new RecordingLogger();
    const engine = new ContextEngine(client, { logger });
    const small = await engine.afterTurn("eng-1", turn(1, "Fix the login bug in auth/session.py", "Looking at it."), 100_000);
    assert.equal(small.commit, null);
    assert.equal(small.threshold, 50_000);
    assert.ok(small.pendingTokens !== null && small.pendingTokens > 0 && small.pendingTokens < 50_000);
    assert.deepEqual(small.addedMessageIds, ["u1", "a1"]);

    // A budget whose half is below the pending tokens: the turn starts a commit and returns.
    const budget = 2 * ((small.pendingTokens ?? 0) + 5);
    const big = await engine.afterTurn("eng-1", turn(2, "Also the logout path", "Done: both fixed."), budget, {
      keepRecentTurns: 1,
    });
    assert.ok(big.commit, "a background commit started");
    assert.equal(engine.runningCommits().length, 1);
    const phase1 = await big.commit.phase1();
    assert.equal(phase1.stage, CommitStage.ARCHIVED);
    assert.equal(phase1.detail.case === "phase1" && phase1.detail.value.archivedMessageCount, 2);
    const terminal = await big.commit.wait();
    assert.equal(terminal.stage, CommitStage.COMPLETED);
    assert.equal(big.commit.commit, terminal.commit);
    assert.match(terminal.commit, /^sessions\/eng-1\/commits\//);
    assert.match(logger.notes.join("\n"), /background commit .* ended: COMPLETED/);
    assert.deepEqual(logger.warnings, []);

    const live = await client.listMessages("eng-1");
    assert.deepEqual(live.messages.map((m) => m.id), ["u2", "a2"]); // the newest turn was kept

    const context = await engine.assemble("eng-1", 8000, { format: ContextFormat.ANTHROPIC_MESSAGES });
    assert.equal(context.fallback, false);
    assert.ok(!context.fallback && context.response.workingMemoryVersion === 1n);
    const first = !context.fallback ? context.response.messages[0]?.parts[0]?.kind : undefined;
    assert.match(String(first?.value), /^\[Session History Summary\]/);
    const rendered = !context.fallback ? (JSON.parse(context.response.renderedJson) as Array<{ role: string }>) : [];
    assert.equal(rendered[0]?.role, "user");
    await engine.close();
  });

  test("a session the server commits itself is never committed by the engine", async () => {
    await client.createSession("eng-auto", { config: { autoCommit: { messageCountThreshold: 2, keepRecentCount: 0 } } });
    const engine = new ContextEngine(client, { logger: new RecordingLogger() });
    const result = await engine.afterTurn("eng-auto", turn(1, "Plan the migration", "Step one: back up."), 10);
    assert.equal(result.commit, null, "over the engine's threshold, but the server's policy rules");
    assert.match(result.serverCommit, /^sessions\/eng-auto\/commits\//);
    const commit = await client.getCommit("eng-auto", result.serverCommit);
    assert.equal(commit.name, result.serverCommit);
    assert.equal((await client.listCommits("eng-auto")).commits.length, 1);
  });

  test("compact archives everything and returns the new summary and the sizes around it", async () => {
    const engine = new ContextEngine(client, { logger: new RecordingLogger() });
    await engine.afterTurn("eng-compact", turn(1, "Write docs/setup.md for the new install flow", "Drafted docs/setup.md."), 1_000_000);
    await engine.afterTurn("eng-compact", turn(2, "Add a troubleshooting section", "Added it."), 1_000_000);
    const result = await engine.compact("eng-compact");
    assert.equal(result.outcome, "completed");
    assert.equal(result.fallback, false);
    assert.equal(result.archivedMessageCount, 4);
    assert.equal(result.archive, "sessions/eng-compact/archives/archive_001");
    assert.equal(result.session, "sessions/eng-compact");
    assert.match(result.commit, /^sessions\/eng-compact\/commits\//);
    assert.equal(result.workingMemoryVersion, 1);
    assert.match(result.summary, /docs\/setup\.md/);
    assert.ok(result.tokensBefore > 0);
    assert.equal((await client.listMessages("eng-compact")).messages.length, 0);
    const again = await engine.compact("eng-compact");
    assert.equal(again.outcome, "skipped");
    assert.notEqual(again.error, "");
  });

  test("the tool executor runs archive search and expand and tool-output reads", async () => {
    const id = "eng-tools";
    const log = Array.from({ length: 3000 }, (_, n) => `line ${n}: ok`).join("\n") + "\nFATAL: quota exceeded\n";
    await client.addMessages(
      id,
      [
        text("q1", Role.USER, "Deploy, and remember the code word heliotrope"),
        { id: "c1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolUse", value: { id: "t1", name: "bash", inputJson: "{}" } } }] },
        { id: "r1", role: Role.USER, parts: [{ kind: { case: "toolResult", value: { toolUseId: "t1", content: log } } }] },
        text("a1", Role.ASSISTANT, "Quota exceeded."),
        text("q2", Role.USER, "Now what?"),
        text("a2", Role.ASSISTANT, "Free some space."),
      ],
      { createSessionIfMissing: true },
    );
    await client.commit(id, 0, { keepRecentTurns: 1 }).wait();

    const tools = new ToolExecutor(client, id, { maxChars: 1000 });
    assert.deepEqual(tools.names, ["archive_search", "archive_expand", "tool_output_read"]);
    const definitions = await tools.definitions();
    assert.deepEqual(definitions.map((d) => d.name).sort(), ["archive_expand", "archive_search", "tool_output_read"]);
    assert.equal(definitions[0]?.input_schema.type, "object");

    const hit = await tools.run("archive_search", { query: "HELIOTROPE" });
    assert.equal(hit.isError, false);
    assert.match(hit.content, /archive_001, message q1 \(user; words( and meaning)?\)/);
    const expanded = await tools.run("archive_expand", '{"archive_id": "archive_001"}');
    assert.equal(expanded.isError, false);
    assert.match(expanded.content, /^archive_001: 4 message\(s\)/);
    assert.ok(expanded.content.length <= 1000);
    const read = await tools.run("tool_output_read", { output_id: "out.r1.0", start_line: 3001 });
    assert.equal(read.content, "out.r1.0: lines 3001-3001 of 3001\nFATAL: quota exceeded\n");
    const block = read.anthropicBlock("toolu_9");
    assert.deepEqual(block, { type: "tool_result", tool_use_id: "toolu_9", content: read.content, is_error: false });

    assert.equal((await tools.run("archive_search", { query: "" })).isError, true);
    assert.equal((await tools.run("archive_expand", "{not json")).content, "the tool input is not valid JSON");
    const unknown = await tools.run("memory_search", { query: "x" });
    assert.match(unknown.content, /^unknown tool 'memory_search'/);
    const missing = await tools.run("archive_expand", { archive_id: "archive_999" });
    assert.equal(missing.isError, true);
    assert.match(missing.content, /^archive_expand failed: /);
    assert.throws(() => new ToolExecutor(client, id, { tools: ["bash"] }), /not a recall tool: bash/);

    const context = await client.assembleContext(id, 100_000, { registeredTools: ["archive_search"] });
    assert.match(context.systemPromptAddition, /archive_search/);
    assert.doesNotMatch(context.systemPromptAddition, /archive_expand/);
  });
  test("the memory tools store, find and forget the session owner's long-term memories", async () => {
    const id = "eng-memory";
    await client.createSession(id, { userId: "ana" });
    const tools = new ToolExecutor(client, id, { tools: ["memory_store", "memory_search", "memory_forget"] });
    const definitions = await tools.definitions();
    assert.deepEqual(definitions.map((d) => d.name).sort(), ["memory_forget", "memory_search", "memory_store"]);

    const stored = await tools.run("memory_store", { type: "preference", text: "Ana prefers answers in German" });
    assert.equal(stored.isError, false);
    const memoryId = /^stored as (\S+)$/.exec(stored.content)?.[1];
    assert.ok(memoryId, stored.content);
    const again = await tools.run("memory_store", { type: "preference", text: "Ana prefers answers in German" });
    assert.equal(again.content, `already known as ${memoryId}`);
    assert.equal((await tools.run("memory_store", { type: "mood", text: "x" })).isError, true);

    const found = await tools.run("memory_search", { query: "German answers" });
    assert.match(found.content, new RegExp(`^- ${memoryId} \\[preference\\] Ana prefers answers in German`));
    const memory = await client.getMemory(memoryId);
    assert.equal(memory.text, "Ana prefers answers in German");

    assert.equal((await tools.run("memory_forget", { memory_id: memoryId })).content, `forgot ${memoryId}`);
    assert.equal((await tools.run("memory_search", { query: "German answers" })).content, "no memory matches 'German answers'");
  });

  test("memoryTools adds the memory tools to the archive tools; updateMemory corrects a memory", async () => {
    const id = "eng-update";
    await client.createSession(id, { userId: "cy" });
    assert.deepEqual(new ToolExecutor(client, id).names, [...RECALL_TOOLS]);
    assert.deepEqual(new ToolExecutor(client, id, { memoryTools: true }).names, [...RECALL_TOOLS, ...MEMORY_TOOLS]);

    const made = await client.createMemory({ userId: "cy" }, MemoryType.PREFERENCE, "Cy likes tea");
    const memoryId = made.memory!.name;
    const updated = await client.updateMemory(memoryId, { text: "Cy likes green tea" }, { reason: "precise" });
    assert.equal(updated.text, "Cy likes green tea");
    assert.equal(updated.type, MemoryType.PREFERENCE);
    assert.deepEqual(updated.history.map((v) => [v.text, v.reason]), [["Cy likes tea", "precise"]]);
    const retyped = await client.updateMemory(memoryId, { type: MemoryType.PROFILE });
    assert.equal(retyped.text, "Cy likes green tea");
    assert.equal(retyped.type, MemoryType.PROFILE);
    assert.throws(() => client.updateMemory(memoryId, {}), /needs text, type or expireTime/);
  });

  test("a memory's lifecycle: supersedes, expireTime, includeSuperseded, retire, purgeUserData", async () => {
    const owner = { userId: "dee" };
    const old = (await client.createMemory(owner, MemoryType.DECISION, "The ledger uses MySQL")).memory!;
    const later = new Date(Date.now() + 30 * 86_400_000);
    const made = await client.createMemory(owner, MemoryType.DECISION, "The ledger uses CockroachDB", {
      supersedes: [old.name.split("/")[1] as string], // an id or a name
      expireTime: later,
    });
    const current = made.memory!;
    assert.deepEqual(current.supersedes, [old.name]);
    assert.equal(old.owner, "users/dee");
    assert.equal(current.expireTime?.seconds, BigInt(Math.floor(later.getTime() / 1000)));
    const found = await client.searchMemories("ledger uses", { owner });
    assert.deepEqual(found.hits.map((h) => h.memory?.name), [current.name]);
    const both = await client.searchMemories("ledger uses", { owner, includeSuperseded: true });
    assert.deepEqual(both.hits.map((h) => [h.memory?.name, h.memory?.state]), [
      [current.name, MemoryState.ACTIVE],
      [old.name, MemoryState.SUPERSEDED],
    ]);
    const sooner = new Date(Date.now() + 86_400_000);
    const expiring = await client.updateMemory(current.name, { expireTime: sooner });
    assert.equal(expiring.expireTime?.seconds, BigInt(Math.floor(sooner.getTime() / 1000)));
    assert.equal(expiring.version, 1n);
    const retired = await client.retireMemory(current.name, "the ledger moved again");
    assert.equal(retired.state, MemoryState.RETIRED);
    assert.equal(retired.retireReason, "the ledger moved again");

    await client.createSession("dee-1", { userId: "dee" });
    const purged = await client.purgeUserData("dee", { requestId: "purge-dee" });
    assert.deepEqual([purged.purgedMemoryCount, purged.purgedSessionCount], [2, 1]);
    const again = await client.purgeUserData("dee", { requestId: "purge-dee" });
    assert.deepEqual([again.purgedMemoryCount, again.purgedSessionCount], [2, 1]);
    assert.equal((await client.listMemories({ owner: "users/dee" })).memories.length, 0);
  });

  test("assembleContext renders the context for the API the format names", async () => {
    const id = "eng-format";
    await client.addMessages(id, [
      { role: Role.USER, parts: [{ kind: { case: "text", value: "List the files." } }] },
      { role: Role.ASSISTANT, parts: [{ kind: { case: "toolUse", value: { id: "c1", name: "ls", inputJson: "{}" } } }] },
      { role: Role.USER, parts: [{ kind: { case: "toolResult", value: { toolUseId: "c1", content: "a b" } } }] },
    ], { createSessionIfMissing: true });
    const chat = await client.assembleContext(id, 50_000, { format: ContextFormat.OPENAI_CHAT_COMPLETIONS });
    const messages = JSON.parse(chat.renderedJson) as Array<{ role: string; tool_call_id?: string }>;
    assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool"]);
    assert.equal(messages[2]?.tool_call_id, "c1");
    const items = JSON.parse(
      (await client.assembleContext(id, 50_000, { format: ContextFormat.OPENAI_RESPONSES })).renderedJson,
    ) as Array<{ type: string }>;
    assert.deepEqual(items.map((i) => i.type), ["message", "function_call", "function_call_output"]);
    assert.equal((await client.assembleContext(id, 50_000)).renderedJson, "");
  });

  test("a batch whose answer was lost is re-sent under its own request id, never stored twice", async () => {
    const engine = new ContextEngine(client, { logger: new RecordingLogger() });
    // Messages without ids: only the request id tells the two sends apart.
    const once: MessageInit = { role: Role.USER, parts: [{ kind: { case: "text", value: "sent once" } }] };
    const requestId = "lost-answer-1";
    await client.addMessages("eng-lost", [once], { createSessionIfMissing: true, requestId });
    // What afterTurn keeps when the answer does not come (the server stored the batch).
    (engine as unknown as { unsent: Map<string, unknown[]> }).unsent.set("sessions/eng-lost", [{ messages: [once], requestId }]);
    const next: MessageInit = { role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: "next" } }] };
    const result = await engine.afterTurn("eng-lost", [next], 1000);
    assert.equal(result.fallback, false);
    assert.equal(result.flushedMessages, 1);
    const stored = await client.listMessages("eng-lost");
    assert.deepEqual(
      stored.messages.map((m) => (m.parts[0]?.kind.case === "text" ? m.parts[0].kind.value : "")),
      ["sent once", "next"],
    );
  });

  // Last: it stops the server, and starts a new one on the same port.
  test("with the server stopped the engine falls back to the runtime's own messages, warns once, and catches up", async () => {
    const port = server.port;
    await server.stop(); // nothing listens on the port any more
    const logger = new RecordingLogger();
    const engine = new ContextEngine(client, { logger });
    const own = turn(1, "Rename the config loader", "Renamed it to load_settings.");
    const added = await engine.afterTurn("eng-down", own, 1000);
    assert.equal(added.fallback, true);
    assert.match(added.fallbackReason, /^UNAVAILABLE/);
    assert.equal(added.unsentMessages, 2);
    assert.equal(added.commit, null);
    assert.equal(engine.degraded, true);

    const context = await engine.assemble("eng-down", 8000, { ownMessages: own });
    assert.equal(context.fallback, true);
    assert.deepEqual(context.fallback && context.messages, own, "the runtime's own messages, as they were");
    assert.equal(context.fallback && context.error.codeName, "UNAVAILABLE");
    // Within the budget: the newest messages that fit, opening at a user turn.
    const long = [
      ...turn(7, "x".repeat(400), "y".repeat(400)),
      ...turn(8, "Shorter question", "Short answer"),
      { id: "r8", role: Role.USER, parts: [{ kind: { case: "toolResult" as const, value: { toolUseId: "t", content: "out" } } }] },
      text("a9", Role.ASSISTANT, "last step"),
    ] as MessageInit[];
    const cut = await engine.assemble("eng-down", 120, { ownMessages: long });
    assert.ok(cut.fallback);
    assert.deepEqual(
      cut.fallback && cut.messages.map((m) => m.id),
      ["u8", "a8", "r8", "a9"],
      "the long turn does not fit; the cut opens at the newest turn's request",
    );

    const compacted = await engine.compact("eng-down");
    assert.equal(compacted.outcome, "unavailable");
    assert.equal(compacted.fallback, true);

    assert.equal(logger.warnings.length, 1, "one warning for the outage, not one per call");
    assert.match(logger.warnings[0] ?? "", /unreachable.*goes on with its own messages/);

    // Other errors are not hidden: a bad request still throws.
    await assert.rejects(engine.afterTurn("eng-down", [], 0), RangeError);

    server = await new ServerProcess().start(port);
    const next = await engine.afterTurn("eng-down", turn(2, "Now update the callers", "Updated."), 1_000_000);
    assert.equal(next.fallback, false);
    assert.equal(next.flushedMessages, 2, "the unsent turn went first, under its own request id");
    assert.deepEqual(next.addedMessageIds, ["u2", "a2"]);
    assert.equal(engine.degraded, false);
    assert.deepEqual(logger.notes, [
      "sessions/eng-down: stored 2 messages that waited for the service",
      "working memory service reachable again",
    ]);
    const restored = await engine.assemble("eng-down", 8000);
    assert.equal(restored.fallback, false);
  });
});
