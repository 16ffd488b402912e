// End to end: the real Python server on loopback, driven by the TypeScript client over gRPC.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  CommitStage,
  ContextFormat,
  MessageSchema,
  Role,
  WmClient,
  WmError,
  loadServiceConfig,
  methodPolicies,
  type CommitEvent,
  type MessageInit,
} from "../src/index.js";
import { REPO, SECTIONS, ServerProcess, TcpProxy, uuids } from "./support.js";

const KEY = "acme-key-0123456789abcdef";
const SLOW_SESSION_MODEL = { provider: "scripted" };
let server: ServerProcess;
let client: WmClient;

const text = (id: string, role: Role, body: string): MessageInit => ({ id, role, parts: [{ kind: { case: "text", value: body } }] });

describe("the TypeScript client against the real server", () => {
  before(async () => {
    server = new ServerProcess({
      WM_API_KEYS: `acme:${KEY},other:other-key-0123456789abcdef`,
    });
    const creation = Object.fromEntries(SECTIONS.map((name) => [name, `${name} body`]));
    const script = server.file(
      "script.json",
      JSON.stringify({ loop: true, responses: [{ tool_input: creation, delay: 1.5 }] }),
    );
    // Sessions that choose the scripted model get a Phase 2 that takes 1.5 s: time for a test
    // to break the stream in the middle of a commit.
    server.env.WM_SCRIPTED_RESPONSES = script;
    await server.start();
    client = server.client({ apiKey: KEY });
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("the retry policy and timeouts come from the one service config beside the protos", () => {
    const source = readFileSync(join(REPO, "clients", "python", "wm_client", "data", "wm_grpc_service_config.json"));
    const shipped = readFileSync(new URL("../wm_grpc_service_config.json", import.meta.url));
    assert.ok(source.equals(shipped), "the build copies the file byte for byte");
    const raw = JSON.parse(source.toString()) as { methodConfig: Array<{ name: Array<{ method: string }>; timeout: string; retryPolicy?: { maxAttempts: number } }> };
    const policies = methodPolicies(loadServiceConfig());
    for (const entry of raw.methodConfig) {
      for (const { method } of entry.name) {
        const policy = policies.get(method);
        assert.ok(policy, method);
        assert.equal(policy.timeoutMs, Number.parseFloat(entry.timeout) * 1000, method);
        assert.equal(policy.retry?.maxAttempts, entry.retryPolicy?.maxAttempts, method);
      }
    }
    assert.equal(policies.get("WatchCommit")?.retry, undefined); // a stream is resumed, never retried
    assert.equal(policies.get("AddMessages")?.retry?.codes.has(14), true); // UNAVAILABLE
    // The unary starts of a commit are retried: the same request id answers the same commit.
    assert.equal(policies.get("CreateCommit")?.retry?.codes.has(14), true);
    assert.equal(policies.get("CompactSession")?.retry?.codes.has(14), true);
  });

  test("sessions, messages, a commit stream, the working memory, assemble, search, delete", async () => {
    const id = "ts-e2e";
    const session = await client.createSession(id);
    assert.equal(session.name, `sessions/${id}`);
    const added = await client.addMessages(id, [
      text("u1", Role.USER, "The test suite fails: please fix src/app/settings.py"),
      {
        id: "a1",
        role: Role.ASSISTANT,
        parts: [
          { kind: { case: "text", value: "Running the tests first." } },
          { kind: { case: "toolUse", value: { id: "toolu_01", name: "bash", inputJson: '{"command":"pytest -q"}' } } },
        ],
      },
      {
        id: "u2",
        role: Role.USER,
        parts: [{ kind: { case: "toolResult", value: { toolUseId: "toolu_01", content: "ModuleNotFoundError: No module named 'yaml'", isError: true } } }],
      },
      text("a2", Role.ASSISTANT, "PyYAML is missing from requirements.txt; adding it."),
    ]);
    assert.deepEqual(added.addedMessageIds, ["u1", "a1", "u2", "a2"]);
    assert.equal(added.messageCount, 4n);
    assert.ok(added.pendingTokens > 0n);
    const again = await client.addMessages(id, [text("u1", Role.USER, "The test suite fails: please fix src/app/settings.py")]);
    assert.deepEqual(again.duplicateMessageIds, ["u1"]);

    const listed = await client.listSessions();
    assert.ok(listed.sessions.some((s) => s.name === `sessions/${id}`));
    const live = await client.listMessages(`sessions/${id}`, { pageSize: 2 }); // a name works as an id does
    assert.deepEqual(live.messages.map((m) => m.id), ["u1", "a1"]);
    assert.deepEqual(live.messages.map((m) => m.name), [`sessions/${id}/messages/u1`, `sessions/${id}/messages/a1`]);
    assert.notEqual(live.nextPageToken, "");

    const stream = client.commit(id, 0);
    const events = await stream.collect();
    assert.equal(stream.started?.state !== undefined, true, "CreateCommit answered first");
    assert.match(stream.commit ?? "", new RegExp(`^sessions/${id}/commits/[A-Za-z0-9._-]+$`));
    assert.equal(stream.started?.name, stream.commit);
    assert.deepEqual(events.map((e) => e.sequence), events.map((_, i) => BigInt(i + 1)));
    const first = events[0] as CommitEvent;
    assert.equal(first.stage, CommitStage.ARCHIVED);
    assert.equal(first.detail.case, "phase1");
    assert.equal(first.detail.value?.archive, `sessions/${id}/archives/archive_001`);
    assert.equal(first.commit, stream.commit);
    assert.equal(events.filter((e) => e.terminal).length, 1);
    const last = events.at(-1) as CommitEvent;
    assert.equal(last.stage, CommitStage.COMPLETED);
    assert.equal(last.detail.case === "completed" && last.detail.value.workingMemoryVersion, 1n);
    assert.equal(stream.terminal, last);
    assert.equal(stream.resumes, 0);

    const memory = await client.getWorkingMemory(id);
    assert.equal(memory.version, 1n);
    assert.equal(memory.sections.length, 7);
    assert.match(memory.document, /src\/app\/settings\.py/);

    const context = await client.assembleContext(id, 8000, { format: ContextFormat.ANTHROPIC_MESSAGES });
    assert.equal(context.workingMemoryVersion, 1n);
    const summary = context.messages[0]?.parts[0]?.kind;
    assert.equal(summary?.case, "text");
    assert.match(String(summary?.value), /^\[Session History Summary\]/);
    assert.equal((JSON.parse(context.renderedJson) as Array<{ role: string }>)[0]?.role, "user");

    const found = await client.searchArchives("modulenotfounderror", { session: id });
    assert.equal(found.totalMatches, 1);
    assert.equal(found.hits[0]?.message, `sessions/${id}/messages/u2`);
    assert.equal(found.hits[0]?.archive, `sessions/${id}/archives/archive_001`);
    // The archive's messages: ListMessages with the archive as parent, by its id or its name.
    const archived = await client.listArchiveMessages(id, "archive_001");
    assert.deepEqual(archived.messages.map((m) => m.id), ["u1", "a1", "u2", "a2"]);
    const byName = await client.listMessages(`sessions/${id}/archives/archive_001`, { pageSize: 1 });
    assert.deepEqual(byName.messages.map((m) => m.id), ["u1"]);
    assert.equal((await client.getArchive(id, "archive_001")).commit, stream.commit);
    assert.equal(found.hits[0]?.role, Role.USER);

    // WatchCommit replays what is stored after a sequence, and nothing after the last.
    const replay = await client.watchCommit(id, last.commit, { afterSequence: 1 }).collect();
    assert.deepEqual(replay.map((e) => e.sequence), events.slice(1).map((e) => e.sequence));
    assert.deepEqual(await client.watchCommit(id, last.commit, { afterSequence: last.sequence }).collect(), []);
    // A commit id with its session is the same commit as its name.
    const commitId = last.commit.split("/").at(-1) as string;
    assert.equal((await client.getCommit(id, commitId)).name, last.commit);
    const commits = await client.listCommits(id);
    assert.deepEqual(commits.commits.map((c) => c.name), [last.commit]);

    await client.deleteSession(id);
    await assert.rejects(client.getSession(id), (e: WmError) => e.codeName === "NOT_FOUND");
  });

  test("errors carry the code, ErrorInfo, BadRequest field violations and the server's call id", async () => {
    await assert.rejects(client.getSession("nobody"), (error: unknown) => {
      assert.ok(error instanceof WmError);
      assert.equal(error.codeName, "NOT_FOUND");
      assert.equal(error.reason, "SESSION_NOT_FOUND");
      assert.equal(error.domain, "wm");
      assert.equal(error.fromService, true);
      assert.equal(error.clientSide, false);
      assert.deepEqual(error.metadata, { session_id: "nobody" }); // as the server sends it (errors.proto says "session")
      assert.equal(error.errorInfo?.reason, "SESSION_NOT_FOUND"); // the generated type itself
      assert.match(error.requestId, /^[0-9a-f]{32}$/);
      assert.match(error.message, /^NOT_FOUND: .* \[SESSION_NOT_FOUND\]$/);
      return true;
    });
    await assert.rejects(client.addMessages("ts-bad", [{ role: Role.USER, parts: [] }], { createSessionIfMissing: true }), (error: unknown) => {
      assert.ok(error instanceof WmError);
      assert.equal(error.codeName, "INVALID_ARGUMENT");
      assert.deepEqual(error.fieldViolations.map((v) => v.field), ["messages[0].parts"]);
      assert.ok(error.fieldViolations[0]?.description);
      assert.equal(error.badRequest?.fieldViolations.length, 1);
      assert.notEqual(error.reason, "");
      return true;
    });
  });

  test("validateRequests: a request that breaks the contract's rules is refused before it is sent, as the server refuses it", async () => {
    const proxy = await new TcpProxy(server.port).start();
    const checking = new WmClient({ address: proxy.address, apiKey: KEY, validateRequests: true });
    const id = `ts-validate-${Date.now().toString(36)}`;
    const bad: MessageInit[] = [text("v1", Role.USER, "fine"), { id: "bad id", role: Role.USER, parts: [] }];
    const failure = (call: Promise<unknown>) =>
      call.then(
        () => assert.fail("the request was accepted"),
        (error: unknown) => {
          assert.ok(error instanceof WmError);
          return error;
        },
      );
    try {
      const local = await failure(checking.addMessages(id, bad, { createSessionIfMissing: true }));
      assert.equal(proxy.received.length, 0, "nothing was sent");
      assert.equal(local.codeName, "INVALID_ARGUMENT");
      assert.equal(local.clientSide, true);
      assert.equal(local.fromService, false);
      assert.equal(local.requestId, "");
      assert.equal(local.reason, "INVALID_REQUEST");
      assert.equal(local.domain, "wm");
      assert.deepEqual(
        local.fieldViolations.map((v) => [v.field, v.reason]),
        [
          ["messages[1].id", "string.pattern"],
          ["messages[1].parts", "repeated.min_items"],
        ],
      );
      assert.ok(local.fieldViolations.every((v) => v.description !== ""));
      assert.equal(local.badRequest?.fieldViolations.length, 2);
      // The server answers the same request with the same error (the client without checks).
      const remote = await failure(client.addMessages(id, bad, { createSessionIfMissing: true }));
      assert.equal(remote.clientSide, false);
      assert.equal(remote.fromService, true);
      assert.equal(remote.codeName, local.codeName);
      assert.equal(remote.reason, local.reason);
      assert.deepEqual(
        remote.fieldViolations.map((v) => [v.field, v.reason]),
        local.fieldViolations.map((v) => [v.field, v.reason]),
      );
      await assert.rejects(client.getSession(id), (e: WmError) => e.codeName === "NOT_FOUND");

      // A predefined rule of the contract (wm/v1/rules.proto), checked as the server checks it.
      const named = await failure(checking.getMemory("memories/not-a-memory"));
      assert.deepEqual(named.fieldViolations.map((v) => [v.field, v.reason]), [["name", "string.memory_name"]]);
      const namedRemote = await failure(client.getMemory("memories/not-a-memory"));
      assert.deepEqual(
        namedRemote.fieldViolations.map((v) => [v.field, v.reason]),
        named.fieldViolations.map((v) => [v.field, v.reason]),
      );
      assert.equal(proxy.received.length, 0, "still nothing was sent");

      // A rule across fields (a CEL rule of the message), on a commit's start: the stream throws it.
      const both = await failure(checking.commit(id, 1, { keepRecentTurns: 1 }).wait());
      assert.equal(both.clientSide, true);
      assert.deepEqual(both.fieldViolations.map((v) => [v.field, v.reason]), [["request", "keep.one_of"]]);
      assert.equal(proxy.received.length, 0, "still nothing was sent");

      // A request within the rules goes through.
      const added = await checking.addMessages(id, [text("v1", Role.USER, "fine")], { createSessionIfMissing: true });
      assert.deepEqual(added.addedMessageIds, ["v1"]);
      assert.equal(proxy.received.length, 1);
    } finally {
      checking.close();
      await proxy.stop();
    }
  });

  test("removeRecentMessages takes back the newest live messages, once per request id, never archived ones", async () => {
    const id = `ts-pop-${Date.now().toString(36)}`;
    await client.addMessages(id, [text("p1", Role.USER, "first"), text("p2", Role.ASSISTANT, "second"), text("p3", Role.USER, "third")], {
      createSessionIfMissing: true,
    });
    const removed = await client.removeRecentMessages(id, 1, { requestId: `pop-${id}` });
    assert.deepEqual(removed.messages.map((m) => m.id), ["p3"]);
    assert.equal(removed.messageCount, 2n);
    const again = await client.removeRecentMessages(id, 1, { requestId: `pop-${id}` });
    assert.deepEqual(again.messages.map((m) => m.id), ["p3"]);
    assert.equal((await client.getSession(id)).messageCount, 2n);
    for await (const _ of client.compact(id)) {
      // Phase 2 to its end: everything is archived
    }
    await assert.rejects(client.removeRecentMessages(id, 1), (error: unknown) => {
      assert.ok(error instanceof WmError);
      assert.equal(error.codeName, "FAILED_PRECONDITION");
      assert.equal(error.reason, "MESSAGES_NOT_LIVE");
      assert.deepEqual(error.metadata.live_message_count, "0");
      return true;
    });
  });

  test("bearer tokens: none is UNAUTHENTICATED, another tenant's key does not see the session", async () => {
    await client.createSession("ts-tenant");
    const anonymous = server.client();
    const other = server.client({ apiKey: "other-key-0123456789abcdef" });
    try {
      await assert.rejects(anonymous.getSession("ts-tenant"), (e: WmError) => e.codeName === "UNAUTHENTICATED");
      await assert.rejects(other.getSession("ts-tenant"), (e: WmError) => e.codeName === "NOT_FOUND");
      assert.equal((await client.getSession("ts-tenant")).name, "sessions/ts-tenant");
    } finally {
      anonymous.close();
      other.close();
    }
  });

  test("UNAVAILABLE is retried with the same request id, and the messages are stored once", async () => {
    const proxy = await new TcpProxy(server.port).start();
    const viaProxy = new WmClient({ address: proxy.address, apiKey: KEY });
    try {
      // The first connection is reset once the request (with its request id) has been sent.
      proxy.dropNext(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/);
      const answer = await viaProxy.addMessages("ts-retry", [text("r1", Role.USER, "stored once")], {
        createSessionIfMissing: true,
      });
      assert.deepEqual(answer.addedMessageIds, ["r1"]);
      assert.equal(proxy.received.length, 2, "one dropped connection, one that reached the server");
      const [dropped, delivered] = [uuids(proxy.received[0]), uuids(proxy.received[1])];
      assert.equal(dropped.length, 1);
      assert.deepEqual(delivered, dropped, "the retry carried the same request id");
      const live = await client.listMessages("ts-retry");
      assert.deepEqual(live.messages.map((m) => m.id), ["r1"]);
      // The same request id again (a caller's own retry) returns the stored outcome.
      const replay = await viaProxy.addMessages("ts-retry", [text("r1", Role.USER, "stored once")], {
        createSessionIfMissing: true,
        requestId: dropped[0],
      });
      assert.deepEqual(replay.addedMessageIds, ["r1"]);
    } finally {
      viaProxy.close();
      await proxy.stop();
    }
  });

  test("a deadline ends a call that gets no answer, with DEADLINE_EXCEEDED and no retry", async () => {
    const proxy = await new TcpProxy(server.port).start();
    proxy.dropNext(/never matches(?!)/); // a black hole: accepts, never answers
    const slow = new WmClient({ address: proxy.address, apiKey: KEY, timeoutMs: 300 });
    const started = Date.now();
    try {
      await assert.rejects(slow.getSession("ts-e2e"), (e: WmError) => e.codeName === "DEADLINE_EXCEEDED");
      const elapsed = Date.now() - started;
      assert.ok(elapsed >= 250 && elapsed < 3000, `took ${elapsed} ms`);
      assert.equal(proxy.received.length, 1);
    } finally {
      slow.close();
      await proxy.stop();
    }
  });

  test("a commit stream broken in the middle resumes with WatchCommit after its last sequence", async () => {
    const id = "ts-resume";
    await client.createSession(id, { config: { model: SLOW_SESSION_MODEL } });
    await client.addMessages(id, [text("m1", Role.USER, "Deploy the service"), text("m2", Role.ASSISTANT, "Deploying.")]);
    const proxy = await new TcpProxy(server.port).start();
    const viaProxy = new WmClient({ address: proxy.address, apiKey: KEY });
    try {
      const stream = viaProxy.commit(id, 0);
      const first = await stream.phase1();
      assert.equal(first.stage, CommitStage.ARCHIVED);
      const connectionsBefore = proxy.received.length;
      proxy.cutAll(); // Phase 2 waits 1.5 s for the model: the stream is open, mid-commit
      const rest = await stream.collect();
      assert.ok(stream.resumes >= 1, "the stream was re-opened");
      assert.equal(stream.errors[0]?.codeName, "UNAVAILABLE");
      assert.ok(proxy.received.length > connectionsBefore, "re-attached on a new connection");
      const all = [first, ...rest];
      assert.deepEqual(all.map((e) => e.sequence), all.map((_, i) => BigInt(i + 1)), "each event once, in order");
      assert.equal(all.filter((e) => e.terminal).length, 1);
      assert.equal(all.at(-1)?.stage, CommitStage.COMPLETED);
      const stored = await client.watchCommit(id, first.commit).collect();
      assert.deepEqual(stored.map((e) => e.sequence), all.map((e) => e.sequence));
    } finally {
      viaProxy.close();
      await proxy.stop();
    }
  });

  test("a stream closed mid-way is picked up again by WatchCommit from its last sequence", async () => {
    const id = "ts-watch";
    await client.createSession(id, { config: { model: SLOW_SESSION_MODEL } });
    await client.addMessages(id, [text("w1", Role.USER, "Write the release notes")]);
    const stream = client.commit(id, 0);
    const first = await stream.phase1();
    stream.close(); // the runtime goes away; Phase 2 goes on on the server
    assert.equal((await stream.next()).done, true);
    const resumed = client.watchCommit(id, first.commit, { afterSequence: stream.lastSequence });
    const rest = await resumed.collect();
    assert.equal(rest[0]?.sequence, stream.lastSequence + 1n);
    assert.equal(rest.at(-1)?.stage, CommitStage.COMPLETED);
    assert.equal((await client.getCommit(id, first.commit)).lastSequence, rest.at(-1)?.sequence);
  });

  test("generated schemas: a message built by the client round-trips through the server", async () => {
    const id = "ts-schema";
    await client.addMessages(id, [text("s1", Role.USER, "héllo ✓")], { createSessionIfMissing: true });
    const [stored] = (await client.listMessages(id)).messages;
    assert.equal(stored?.$typeName, MessageSchema.typeName);
    assert.equal(stored?.parts[0]?.kind.value, "héllo ✓");
    assert.ok((stored?.estimatedTokens ?? 0n) > 0n);
    assert.equal(stored?.position, 1n);
  });
});
