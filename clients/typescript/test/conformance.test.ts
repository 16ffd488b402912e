// The rules both clients must share, read from the fixtures the Python suite runs too
// (tests/conformance/*.json at the repository root): one place for the behaviour.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { fromJson, type JsonValue } from "@bufbuild/protobuf";

import { isUserTurnStart } from "../src/index.js";
import { MessageSchema } from "../src/gen/wm/v1/resources_pb.js";

interface TurnCase {
  name: string;
  message: JsonValue;
  starts_turn: boolean;
}

const fixture = (name: string): { cases: TurnCase[] } =>
  JSON.parse(readFileSync(new URL(`../../../../tests/conformance/${name}`, import.meta.url), "utf8"));

describe("conformance with the Python client and the service", () => {
  const { cases } = fixture("turn_starts.json");
  test("the fixture has cases", () => assert.ok(cases.length >= 5));
  for (const c of cases) {
    test(`turn rule: ${c.name}`, () => {
      const message = fromJson(MessageSchema, c.message);
      assert.equal(isUserTurnStart(message), c.starts_turn);
    });
  }
});
