// The rules both clients must share, read from the fixtures the Python suite runs too
// (tests/conformance/*.json at the repository root): one place for the behaviour.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  DEFAULT_MAX_CHARS,
  DEFAULT_RESUME_POLICY,
  ERROR_DOMAIN,
  MAX_KEEP_RECENT,
  MAX_KEEP_TURNS,
  MAX_SEEN_MESSAGES,
  MAX_TOKEN_BUDGET,
  MAX_UNSENT_MESSAGES,
  READ_LINES,
  WmError,
  codeName,
  isResumable,
  isTransientToolError,
  isUnreachable,
  isUserTurnStart,
} from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { MessageSchema } from "../src/gen/wm/v1/resources_pb.js";

interface TurnCase {
  name: string;
  message: JsonValue;
  starts_turn: boolean;
}

interface ErrorCase {
  name: string;
  code: string;
  from_service: boolean;
  engine_falls_back: boolean;
  stream_resumes: boolean;
  tool_error_raised: boolean;
}

interface Rules {
  engine: { max_keep_turns: number; max_seen_messages: number; max_unsent_messages: number };
  tools: { max_chars: number; read_lines: number };
  resume: {
    idle_timeout_ms: number;
    give_up_after_ms: number;
    initial_backoff_ms: number;
    max_backoff_ms: number;
    multiplier: number;
  };
}

const fixture = (name: string): any =>
  JSON.parse(readFileSync(new URL(`../../../../tests/conformance/${name}`, import.meta.url), "utf8"));

describe("conformance with the Python client and the service", () => {
  const { cases } = fixture("turn_starts.json") as { cases: TurnCase[] };
  test("the fixture has cases", () => assert.ok(cases.length >= 5));
  for (const c of cases) {
    test(`turn rule: ${c.name}`, () => {
      const message = fromJson(MessageSchema, c.message);
      assert.equal(isUserTurnStart(message), c.starts_turn);
    });
  }
});

/** The error the client raises for this answer: with the service's ErrorInfo when it answered. */
function errorOf(c: ErrorCase): WmError {
  const code = (Object.values(Code).filter((v) => typeof v === "number") as Code[]).find(
    (v) => codeName(v) === c.code,
  );
  assert.ok(code !== undefined, `unknown code ${c.code}`);
  const details = c.from_service
    ? [{ desc: ErrorInfoSchema, value: { reason: "SOME_REASON", domain: ERROR_DOMAIN } }]
    : [];
  return new WmError(code, "m", { cause: new ConnectError("m", code, undefined, details) });
}

describe("failures are treated as the Python client treats them", () => {
  const { cases } = fixture("error_handling.json") as { cases: ErrorCase[] };
  test("every code from both sides", () => assert.equal(cases.length, 32));
  for (const c of cases) {
    test(c.name, () => {
      const error = errorOf(c);
      assert.equal(error.domain === ERROR_DOMAIN, c.from_service);
      assert.equal(isUnreachable(error), c.engine_falls_back, "engine falls back");
      assert.equal(isResumable(error), c.stream_resumes, "stream resumes");
      assert.equal(isTransientToolError(error), c.tool_error_raised, "tool error raised");
    });
  }
});

describe("the limits and defaults are the rule set's (clients/rules.json)", () => {
  const d = JSON.parse(readFileSync(new URL("../../../rules.json", import.meta.url), "utf8")) as Rules;
  test("engine limits (the contract's are the server's, checked by the drift check)", () => {
    assert.equal(MAX_TOKEN_BUDGET, 10_000_000);
    assert.equal(MAX_KEEP_RECENT, 10_000);
    assert.equal(MAX_KEEP_TURNS, d.engine.max_keep_turns);
    assert.equal(MAX_SEEN_MESSAGES, d.engine.max_seen_messages);
    assert.equal(MAX_UNSENT_MESSAGES, d.engine.max_unsent_messages);
  });
  test("tool executor defaults", () => {
    assert.equal(DEFAULT_MAX_CHARS, d.tools.max_chars);
    assert.equal(READ_LINES, d.tools.read_lines);
  });
  test("resume policy", () => {
    assert.deepEqual(
      { ...DEFAULT_RESUME_POLICY },
      {
        idleTimeoutMs: d.resume.idle_timeout_ms,
        giveUpAfterMs: d.resume.give_up_after_ms,
        initialBackoffMs: d.resume.initial_backoff_ms,
        maxBackoffMs: d.resume.max_backoff_ms,
        multiplier: d.resume.multiplier,
      },
    );
  });
});
