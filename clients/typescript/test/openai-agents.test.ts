// The Agents JS runner keeps its history in the real Python server through WmAgentsSession;
// its model is a scripted implementation of the SDK's own Model interface.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Agent, Usage, run, setTracingDisabled, tool, type AgentInputItem, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";

import { WmClient, WmError } from "../src/index.js";
import { WmAgentsSession, itemToMessage, messageToItems } from "../src/openai-agents.js";
import { ServerProcess } from "./support.js";

let server: ServerProcess;
let client: WmClient;

/** Answers from a list, and records every request's input. */
class ScriptedModel implements Model {
  readonly inputs: AgentInputItem[][] = [];
  constructor(private readonly answers: ModelResponse["output"][]) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(typeof request.input === "string" ? [{ role: "user", content: request.input }] : [...request.input]);
    const output = this.answers.shift();
    assert.ok(output, "the model was asked more often than scripted");
    return { usage: new Usage(), output };
  }
  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed");
  }
}

const balance = tool({
  name: "ledger_balance",
  description: "The balance of a ledger account.",
  parameters: { type: "object", properties: { account: { type: "string" } }, required: ["account"], additionalProperties: false },
  strict: true,
  execute: async (input) => `${(input as { account: string }).account}: 1,234.56 EUR`,
});

const say = (text: string) => ({ type: "message" as const, role: "assistant" as const, status: "completed" as const, content: [{ type: "output_text" as const, text }] });

describe("WmAgentsSession against the real server", () => {
  before(async () => {
    setTracingDisabled(true);
    server = await new ServerProcess().start();
    client = server.client();
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  test("a runner stores its turns, reads them back, pops the newest and clears", async () => {
    const session = new WmAgentsSession(`ts-agents-${Date.now().toString(36)}`, client, { history: "live", userId: "hal" });
    const model = new ScriptedModel([
      [{ type: "function_call", callId: "c1", name: "ledger_balance", arguments: '{"account":"cash"}', status: "completed" }],
      [say("Cash: 1,234.56")],
      [say("Still 1,234.56")],
    ]);
    const agent = new Agent({ name: "bookkeeper", instructions: "Answer briefly.", model, tools: [balance] });
    const result = await run(agent, "What is the cash balance?", { session });
    assert.equal(result.finalOutput, "Cash: 1,234.56");

    const items = (await session.getItems()) as unknown as Record<string, unknown>[];
    assert.deepEqual(items[0], { role: "user", content: "What is the cash balance?" });
    assert.deepEqual(
      items.map((i) => i.type ?? "message"),
      ["message", "function_call", "function_call_result", "message"],
    );
    assert.equal(items[2]?.name, "ledger_balance");
    assert.deepEqual(items[2]?.output, { type: "text", text: "cash: 1,234.56 EUR" });
    const stored = await client.getSession(session.sessionId);
    assert.equal(stored.messageCount, 4n);
    assert.equal(stored.userId, "hal");

    await run(agent, "And now?", { session });
    const sent = model.inputs[2] as unknown as Record<string, unknown>[];
    assert.deepEqual(sent.map((i) => i.role ?? i.type), ["user", "function_call", "function_call_result", "assistant", "user"]);

    assert.deepEqual(await session.popItem(), say("Still 1,234.56"));
    assert.deepEqual(((await session.getItems(1)) as unknown as Record<string, unknown>[])[0], { role: "user", content: "And now?" });
    await session.clearSession();
    assert.deepEqual(await session.getItems(), []);
    assert.equal(await session.popItem(), undefined);
  });

  test("the assembled history starts with the summary; archived messages cannot be popped", async () => {
    const session = new WmAgentsSession(`ts-agents-sum-${Date.now().toString(36)}`, client);
    await session.addItems([
      { role: "user", content: "Migrate the ledger to PostgreSQL." },
      say("Done: the ledger runs on PostgreSQL 16."),
    ]);
    for await (const _ of client.compact(session.sessionId)) {
      // to Phase 2's end
    }
    const items = (await session.getItems()) as unknown as Record<string, unknown>[];
    assert.equal(items.length, 1);
    assert.match(String(items[0]?.content), /^\[Session History Summary\]/);
    await assert.rejects(session.popItem(), (error: unknown) => error instanceof WmError && error.reason === "MESSAGES_NOT_LIVE");
  });

  test("items round-trip through messages, unknown ones whole", () => {
    const reasoning = { type: "reasoning", id: "rs_1", content: [{ type: "input_text", text: "think" }] } as unknown as AgentInputItem;
    const items: AgentInputItem[] = [
      { role: "system", content: "Be brief." },
      say("Hi"),
      { type: "function_call", callId: "c9", name: "f", arguments: '{"a":1}' },
      { type: "function_call_result", callId: "c9", name: "f", status: "completed", output: { type: "text", text: "ok" } },
      reasoning,
    ];
    const names = new Map<string, string>();
    const back = items.map((item, n) => messageToItems({ ...itemToMessage(item, `m${n}`), $typeName: "wm.v1.Message" } as never, names));
    assert.deepEqual(back, items.map((item) => [item]));
  });
});
