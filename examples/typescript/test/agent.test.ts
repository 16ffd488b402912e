// The agent example end to end: the real Anthropic SDK against the local fake Messages API
// (tests/support/fake_anthropic_server.py), the real Working Memory server, the TypeScript
// ContextEngine and ToolExecutor in between.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import { ContextEngine, ToolExecutor, type Logger } from "@working-memory/client";

import { Agent } from "../src/agent.js";

// The server launcher of the client's own tests (built before this package).
type Support = typeof import("../../../clients/typescript/dist/test/support.js");
const support: Support = await import(
  new URL("../../../../clients/typescript/dist/test/support.js", import.meta.url).href
);

interface Recorded {
  path: string;
  headers: Record<string, string>;
  body: { system?: string; messages: Anthropic.MessageParam[]; tools?: Anthropic.Tool[] };
}

/** The fake Messages API with scripted replies; `stop()` returns the requests it received. */
async function fakeAnthropic(replies: unknown[]) {
  const dir = mkdtempSync(join(tmpdir(), "wm-fake-anthropic-"));
  writeFileSync(join(dir, "script.json"), JSON.stringify(replies));
  const child = spawn(
    support.python(),
    [join(support.REPO, "tests", "support", "fake_anthropic_server.py"), join(dir, "script.json"), join(dir, "requests.json")],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const lines = createInterface({ input: child.stdout });
  const [baseURL] = (await lines[Symbol.asyncIterator]().next()).value.split(/\s/) as string[];
  lines.close();
  return {
    baseURL: baseURL as string,
    async stop(): Promise<Recorded[]> {
      child.stdin.end();
      await exited;
      const recorded = JSON.parse(readFileSync(join(dir, "requests.json"), "utf8")) as Recorded[];
      rmSync(dir, { recursive: true, force: true });
      return recorded;
    },
  };
}

const texts = (message: Anthropic.MessageParam | undefined): string =>
  typeof message?.content === "string"
    ? message.content
    : (message?.content ?? []).map((b) => (b.type === "text" ? b.text : "")).join("\n");

test("the agent loop: afterTurn, assemble before each call, recall tools run by the executor, compact", async () => {
  const fake = await fakeAnthropic([
    { text: "Deployed to staging. Noted: the code word is heliotrope." },
    { tool_use: { name: "archive_search", input: { query: "code word" } }, text: "Let me check the archive." },
    { text: "The code word was heliotrope." },
    { text: "Still here: working from my own copy of the conversation." },
  ]);
  const server = await new support.ServerProcess().start();
  const client = server.client();
  const warnings: string[] = [];
  const logger: Logger = { warn: (m) => warnings.push(m), info: () => undefined };
  const engine = new ContextEngine(client, { logger });
  const session = "agent-example";
  const anthropic = new Anthropic({ apiKey: "test-key", baseURL: fake.baseURL, maxRetries: 0 });
  const agent = new Agent({ anthropic, engine, tools: new ToolExecutor(client, session), session });
  let requests: Recorded[] = [];
  try {
    const first = await agent.run("Deploy the service to staging. Remember the code word: heliotrope.");
    assert.equal(first.answer, "Deployed to staging. Noted: the code word is heliotrope.");
    const between = await engine.compact(session); // the runtime shrinks its context
    assert.equal(between.outcome, "completed");
    assert.equal(between.archivedMessageCount, 2);

    const second = await agent.run("What was the code word? Check before you answer.");
    assert.equal(second.answer, "The code word was heliotrope.");
    assert.equal(second.steps, 2);
    assert.equal(second.toolCalls.length, 1);
    const [call] = second.toolCalls;
    assert.equal(call?.name, "archive_search");
    assert.equal(call?.result.isError, false);
    assert.match(call?.result.content ?? "", /archive_001, message .* \(user; words[a-z ]*\): .*heliotrope/);
    assert.equal(second.fallbacks, 0);

    const last = await engine.compact(session);
    assert.equal(last.outcome, "completed");
    assert.equal(last.workingMemoryVersion, 2);
    assert.equal((await client.listArchives(session)).archives.length, 2);
    assert.deepEqual(warnings, []);

    // The memory goes down: the agent still answers, from its own history.
    await server.stop();
    const third = await agent.run("Anything else?");
    assert.equal(third.answer, "Still here: working from my own copy of the conversation.");
    assert.equal(third.fallbacks, 1);
    assert.equal(warnings.length, 1);
  } finally {
    await engine.close();
    client.close();
    await server.stop();
    requests = await fake.stop();
  }

  assert.equal(requests.length, 4);
  const [deploy, ask, afterTool, down] = requests.map((r) => r.body) as Recorded["body"][];
  // 1: a fresh session: the context is the request itself, no summary yet.
  assert.deepEqual(deploy?.messages.map(texts), ["Deploy the service to staging. Remember the code word: heliotrope."]);
  // 2: after the compaction the model sees the assembled summary first, the system prompt
  // addition names the recall tools, and the server's tool definitions are registered.
  assert.match(texts(ask?.messages[0]), /^\[Session History Summary\]/);
  assert.match(texts(ask?.messages.at(-1)), /What was the code word\?/);
  assert.match(ask?.system ?? "", /archive_search/);
  assert.deepEqual(ask?.tools?.map((t) => t.name).sort(), ["archive_expand", "archive_search", "tool_output_read"]);
  // 3: the tool call and the server's real search result were assembled into the next request.
  const result = afterTool?.messages.at(-1);
  const block = Array.isArray(result?.content) ? result.content[0] : undefined;
  assert.equal(block?.type, "tool_result");
  assert.match(JSON.stringify(block), /archive_001, message .*heliotrope/);
  assert.ok(afterTool?.messages.some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === "tool_use" && b.name === "archive_search")));
  // 4: the fallback: the runtime's own history, whole, without the service's summary.
  assert.equal(down?.messages.length, agent.history.length - 1); // all but the final answer
  assert.doesNotMatch(texts(down?.messages[0]), /Session History Summary/);
  assert.equal(down?.tools?.length, 3); // the definitions fetched while the service was up
});
