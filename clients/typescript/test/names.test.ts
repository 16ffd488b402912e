// Resource names (src/names.ts): a bare id or a full name is accepted wherever a resource is meant.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import {
  ALL_SESSIONS,
  archiveName,
  commitName,
  memoryName,
  messageName,
  ownerName,
  PATTERNS,
  sessionId,
  sessionName,
  shortId,
  toolOutputName,
  workingMemoryName,
} from "../src/index.js";

test("a session is its id or its name; a child's name gives its session", () => {
  assert.equal(sessionName("s1"), "sessions/s1");
  assert.equal(sessionName("sessions/s1"), "sessions/s1");
  assert.equal(sessionName("sessions/s1/commits/c_1"), "sessions/s1");
  assert.equal(sessionId("sessions/s1/archives/archive_001"), "s1");
  assert.equal(sessionId("s1"), "s1");
  assert.equal(ALL_SESSIONS, "sessions/-");
});

test("children of a session: an id is put under the session, a name is taken as it is", () => {
  assert.equal(commitName("s1", "c_1"), "sessions/s1/commits/c_1");
  assert.equal(commitName("sessions/s1", "sessions/s2/commits/c_9"), "sessions/s2/commits/c_9");
  assert.equal(archiveName("s1", "archive_002"), "sessions/s1/archives/archive_002");
  assert.equal(toolOutputName("sessions/s1", "out.m12.0"), "sessions/s1/toolOutputs/out.m12.0");
  assert.equal(workingMemoryName("s1"), "sessions/s1/workingMemories/latest");
  assert.equal(workingMemoryName("s1", 0), "sessions/s1/workingMemories/latest");
  assert.equal(workingMemoryName("s1", 3n), "sessions/s1/workingMemories/3");
  assert.equal(shortId("sessions/s1/archives/archive_002"), "archive_002");
  assert.equal(shortId("archive_002"), "archive_002");
});

test("memories and their owners", () => {
  assert.equal(memoryName("mem_0123456789abcdef0123"), "memories/mem_0123456789abcdef0123");
  assert.equal(memoryName("memories/mem_0123456789abcdef0123"), "memories/mem_0123456789abcdef0123");
  assert.equal(ownerName({ userId: "ana" }), "users/ana");
  assert.equal(ownerName({ agentId: "bot" }), "agents/bot");
  assert.equal(ownerName({ session: "s1" }), "sessions/s1");
  assert.equal(ownerName("users/ana"), "users/ana");
  assert.throws(() => ownerName("ana"), RangeError);
  assert.throws(() => ownerName({ userId: "" }), RangeError);
});

// The shared cases (tests/conformance/names.json at the repository root), which the server's and
// the Python client's suites run too (tests/conformance/test_resource_names.py).
interface NameCase {
  kind: string;
  name: string;
  ids?: string[];
}
interface ClientCase {
  function: string;
  args: (string | number)[];
  result: string;
}
const fixture: { names: NameCase[]; not_names: NameCase[]; client: ClientCase[] } = JSON.parse(
  readFileSync(new URL("../../../../tests/conformance/names.json", import.meta.url), "utf8"),
);
const camel = (snake: string): string => snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const functions: Record<string, (...args: any[]) => string> = {
  archiveName,
  commitName,
  memoryName,
  messageName,
  sessionId,
  sessionName,
  shortId,
  toolOutputName,
  workingMemoryName,
};

describe("resource names as tests/conformance/names.json says", () => {
  test("the patterns are the proto's, and the fixture has a case of every kind", () => {
    assert.deepEqual(Object.keys(PATTERNS).sort(), [...new Set(fixture.names.map((c) => c.kind))].sort());
    assert.deepEqual(Object.keys(PATTERNS).sort(), [...new Set(fixture.not_names.map((c) => c.kind))].sort());
    assert.equal(PATTERNS.Commit?.text, "sessions/{session}/commits/{commit}");
    assert.deepEqual(PATTERNS.ToolOutput?.variables, ["session", "tool_output"]);
  });

  for (const c of fixture.names) {
    test(`${c.kind}: ${c.name} has the ids ${c.ids?.join(", ")}`, () => {
      const pattern = PATTERNS[c.kind]!;
      assert.equal(pattern.format(...c.ids!), c.name);
      assert.deepEqual(pattern.parse(c.name), c.ids);
    });
  }

  for (const c of fixture.not_names) {
    test(`${c.kind}: ${JSON.stringify(c.name)} is not one`, () => {
      assert.equal(PATTERNS[c.kind]!.parse(c.name), undefined);
    });
  }

  for (const c of fixture.client) {
    test(`${camel(c.function)}(${c.args.join(", ")})`, () => {
      const run = functions[camel(c.function)];
      assert.ok(run, `the client has ${camel(c.function)}`);
      assert.equal(run(...c.args), c.result);
    });
  }
});
