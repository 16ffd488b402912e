// The ContextEngine's own bounds during an outage (clients/rules.json: max_unsent_messages,
// max_seen_messages), against an address where nothing listens: connections are refused.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ContextEngine,
  MAX_SEEN_MESSAGES,
  MAX_UNSENT_MESSAGES,
  Role,
  WmClient,
  type Logger,
  type MessageInit,
} from "../src/index.js";
import { freePort } from "./support.js";

const user = (body: string): MessageInit => ({ role: Role.USER, parts: [{ kind: { case: "text", value: body } }] });

test("an outage holds at most the bound of unsent messages and remembers the newest seen", async () => {
  const warnings: string[] = [];
  const logger: Logger = { warn: (m) => warnings.push(m), info: () => undefined };
  const client = new WmClient({ address: `127.0.0.1:${await freePort()}`, serviceConfig: { methodConfig: [] } });
  const engine = new ContextEngine(client, { logger });
  try {
    const half = MAX_UNSENT_MESSAGES / 2 + 1;
    const batch = (tag: string) => Array.from({ length: half }, (_, i) => user(`${tag} ${i}`));
    const first = await engine.afterTurn("s", batch("first"), 100_000);
    assert.equal(first.fallback, true);
    assert.equal(first.unsentMessages, half);
    const second = await engine.afterTurn("s", batch("second"), 100_000);
    assert.equal(second.unsentMessages, half, "the oldest batch was dropped to stay within the bound");
    assert.ok(warnings.some((w) => w.includes(`dropped ${half} unsent messages`)), warnings.join("\n"));

    const context = await engine.assemble("s", 10_000_000);
    assert.equal(context.fallback, true);
    const texts = (context.fallback ? context.messages : []).map((m) =>
      m.parts?.[0]?.kind?.case === "text" ? m.parts[0].kind.value : "",
    );
    assert.equal(texts.length, MAX_SEEN_MESSAGES);
    assert.equal(texts.at(-1), `second ${half - 1}`);
  } finally {
    await engine.close();
    client.close();
  }
});
