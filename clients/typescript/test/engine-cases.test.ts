// The engine conformance cases (tests/conformance/engine_cases.json at the repository root),
// run by the TypeScript ContextEngine and ToolExecutor against the real Python server; the
// Python suite runs the same file (tests/conformance/test_engine_cases.py).
//
// Between the client and the server sits a transport interceptor: it records every request the
// client sends and plays the case's faults (UNAVAILABLE before a call is sent, or after the
// server answered: a lost answer). The client's service config is empty, so its own retries
// are off and what is recorded is the engine's behaviour.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import {
  CommitStage,
  ContextEngine,
  MessageSchema,
  SessionConfigSchema,
  ToolExecutor,
  WmClient,
  WmError,
  type Logger,
  type Message,
} from "../src/index.js";
import { ServerProcess } from "./support.js";

const SESSION = "s";

interface Step {
  do: "after_turn" | "assemble" | "compact" | "wait_idle" | "tool";
  turn?: JsonValue[];
  token_budget?: number;
  commit_ratio?: number;
  keep_recent?: number;
  own_messages?: boolean;
  tokens_before?: number;
  name?: string;
  input?: JsonValue;
  expect?: Record<string, unknown>;
}

interface ExpectedRequest {
  rpc: string;
  request_id?: string;
  texts?: string[];
  fields?: Record<string, JsonValue>;
}

interface Case {
  name: string;
  faults?: Array<{ rpc: string; call: number; kind: "unavailable" | "answer_lost" }>;
  session_config?: JsonValue;
  steps: Step[];
  requests: ExpectedRequest[];
  stored_messages: number;
}

const { cases } = JSON.parse(
  readFileSync(new URL("../../../../tests/conformance/engine_cases.json", import.meta.url), "utf8"),
) as { cases: Case[] };

const quiet: Logger = { warn: () => undefined, info: () => undefined };

/** The requests a client sent, as proto3 JSON, and an interceptor that plays the faults. */
class Recorder {
  readonly sent: Array<{ rpc: string; json: Record<string, JsonValue>; texts: string[] }> = [];
  private readonly counts = new Map<string, number>();

  constructor(private readonly faults: Case["faults"] = []) {}

  readonly interceptor: Interceptor = (next) => async (req) => {
    const rpc = req.method.name;
    const count = (this.counts.get(rpc) ?? 0) + 1;
    this.counts.set(rpc, count);
    let message: unknown;
    if (req.stream) {
      const items: unknown[] = [];
      for await (const item of req.message) items.push(item);
      message = items[0];
      req = { ...req, message: (async function* () { yield* items; })() } as typeof req;
    } else {
      message = req.message;
    }
    const json = toJson(req.method.input, message as never) as Record<string, JsonValue>;
    const parts = (message as { messages?: Message[] }).messages ?? [];
    this.sent.push({ rpc, json, texts: parts.map(textOf) });
    const fault = this.faults?.find((f) => f.rpc === rpc && f.call === count)?.kind;
    if (fault === "unavailable") throw new ConnectError("injected: the connection was refused", Code.Unavailable);
    const response = await next(req);
    if (fault === "answer_lost") throw new ConnectError("injected: the answer was lost", Code.Unavailable);
    return response;
  };
}

function textOf(message: Message): string {
  return message.parts.map((p) => (p.kind.case === "text" ? p.kind.value : "")).join("");
}

async function runStep(step: Step, engine: ContextEngine, tools: ToolExecutor, history: Message[]) {
  switch (step.do) {
    case "after_turn": {
      const turn = (step.turn ?? []).map((m) => fromJson(MessageSchema, m));
      history.push(...turn);
      const result = await engine.afterTurn(SESSION, turn, step.token_budget as number, {
        commitRatio: step.commit_ratio ?? 0.5,
        keepRecent: step.keep_recent,
      });
      return {
        stored: !result.fallback,
        unsent_messages: result.unsentMessages,
        flushed_messages: result.flushedMessages,
        commit_started: result.commit !== null,
      };
    }
    case "assemble": {
      const context = await engine.assemble<Message>(SESSION, step.token_budget as number, {
        ownMessages: step.own_messages ? [...history] : undefined,
      });
      const messages = context.fallback ? context.messages : context.response.messages;
      return { fallback: context.fallback, texts: messages.map(textOf) };
    }
    case "compact":
      return { outcome: (await engine.compact(SESSION, { tokensBefore: step.tokens_before })).outcome };
    case "wait_idle":
      return {
        terminals: (await engine.waitIdle()).map((settled) =>
          settled.status === "fulfilled"
            ? (CommitStage[settled.value.stage] ?? "").toLowerCase()
            : `error: ${String(settled.reason)}`,
        ),
      };
    case "tool":
      try {
        return { is_error: (await tools.run(step.name as string, step.input)).isError };
      } catch (error) {
        if (error instanceof WmError) return { raises: error.codeName };
        throw error;
      }
  }
}

function checkRequests(c: Case, sent: Recorder["sent"]): void {
  assert.deepEqual(
    sent.map((r) => r.rpc),
    c.requests.map((r) => r.rpc),
  );
  const ids = new Map<string, string>();
  c.requests.forEach((expected, index) => {
    const actual = sent[index] as Recorder["sent"][number];
    if (expected.request_id !== undefined) {
      const id = actual.json.requestId;
      assert.ok(typeof id === "string" && id !== "", `${actual.rpc} has a request id`);
      if (!ids.has(expected.request_id)) ids.set(expected.request_id, id);
      assert.equal(id, ids.get(expected.request_id), `request id ${expected.request_id} of ${actual.rpc}`);
    }
    if (expected.texts !== undefined) assert.deepEqual(actual.texts, expected.texts, actual.rpc);
    for (const [key, value] of Object.entries(expected.fields ?? {})) {
      assert.deepEqual(actual.json[key], value, `${actual.rpc}.${key}`);
    }
  });
  assert.equal(new Set(ids.values()).size, ids.size, "two labels must be two request ids");
}

describe("the engine conformance cases", () => {
  test("the file has the cases", () => assert.ok(cases.length >= 10));
  for (const c of cases) {
    describe(c.name, () => {
      let server: ServerProcess;
      before(async () => {
        server = await new ServerProcess().start();
      });
      after(async () => {
        await server.stop();
      });

      test("the TypeScript engine passes it", async () => {
        const plain = server.client();
        const sessions = new Http2SessionManager(`http://${server.address}`);
        const recorder = new Recorder(c.faults);
        const transport = createGrpcTransport({
          baseUrl: `http://${server.address}`,
          sessionManager: sessions,
          interceptors: [recorder.interceptor],
        });
        const client = new WmClient({
          address: server.address,
          transport,
          serviceConfig: { methodConfig: [] },
          resumePolicy: { giveUpAfterMs: 10_000, initialBackoffMs: 50 },
        });
        const engine = new ContextEngine(client, { logger: quiet });
        const tools = new ToolExecutor(client, SESSION);
        try {
          if (c.session_config !== undefined) {
            await plain.createSession(SESSION, { config: fromJson(SessionConfigSchema, c.session_config) });
          }
          const history: Message[] = [];
          for (const [index, step] of c.steps.entries()) {
            const got = (await runStep(step, engine, tools, history)) as Record<string, unknown>;
            for (const [key, value] of Object.entries(step.expect ?? {})) {
              assert.deepEqual(got[key], value, `step ${index} (${step.do}): ${key} in ${JSON.stringify(got)}`);
            }
          }
          await engine.close();
          checkRequests(c, recorder.sent);
          const session = await plain.getSession(SESSION);
          assert.equal(Number(session.totalMessageCount), c.stored_messages);
        } finally {
          await engine.close();
          sessions.abort();
          plain.close();
        }
      });
    });
  }
});
