// Resource names (src/names.ts): a bare id or a full name is accepted wherever a resource is meant.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ALL_SESSIONS,
  archiveName,
  commitName,
  memoryName,
  ownerName,
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
