// The same client over the server's HTTP door: connect-node's Connect transport (HTTP/1.1,
// JSON) against WM_HTTP_ADDRESS, instead of gRPC.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createConnectTransport } from "@connectrpc/connect-node";

import { CommitStage, Role, WmClient, WmError } from "../src/index.js";
import { ServerProcess, freePort } from "./support.js";

const KEY = "door-key-0123456789abcdef";

describe("the TypeScript client over the HTTP door (Connect protocol, JSON)", () => {
  let server: ServerProcess;
  let client: WmClient;
  let httpPort = 0;

  before(async () => {
    httpPort = await freePort();
    server = await new ServerProcess({ WM_HTTP_ADDRESS: `127.0.0.1:${httpPort}`, WM_API_KEYS: `acme:${KEY}` }).start();
    const transport = createConnectTransport({
      baseUrl: `http://127.0.0.1:${httpPort}`,
      httpVersion: "1.1",
      useBinaryFormat: false,
    });
    client = new WmClient({ transport, apiKey: KEY });
  });

  after(async () => {
    client?.close();
    await server?.stop();
  });

  test("sessions, messages, a streamed commit and assemble over JSON", async () => {
    const id = "door-1";
    assert.equal((await client.createSession(id)).name, `sessions/${id}`);
    const added = await client.addMessages(id, [
      { id: "d1", role: Role.USER, parts: [{ kind: { case: "text", value: "Ship the door, mention curl" } }] },
      { id: "d2", role: Role.ASSISTANT, parts: [{ kind: { case: "text", value: "Shipped." } }] },
    ]);
    assert.deepEqual(added.addedMessageIds, ["d1", "d2"]);
    const events = await client.commit(id, 0).collect();
    assert.equal(events[0]?.stage, CommitStage.ARCHIVED);
    assert.equal(events.at(-1)?.stage, CommitStage.COMPLETED);
    assert.deepEqual(events.map((e) => e.sequence), events.map((_, i) => BigInt(i + 1)));
    const context = await client.assembleContext(id, 8000);
    assert.equal(context.workingMemoryVersion, 1n);
    // The gRPC side sees what the door stored.
    const grpc = server.client({ apiKey: KEY });
    try {
      assert.equal((await grpc.getWorkingMemory(id)).version, 1n);
    } finally {
      grpc.close();
    }
  });

  test("errors over the door carry the same ErrorInfo and BadRequest details", async () => {
    await assert.rejects(client.getSession("nobody"), (error: unknown) => {
      assert.ok(error instanceof WmError);
      assert.equal(error.codeName, "NOT_FOUND");
      assert.equal(error.reason, "SESSION_NOT_FOUND");
      assert.equal(error.domain, "wm");
      return true;
    });
    await assert.rejects(client.addMessages("door-1", [{ role: Role.USER, parts: [] }]), (error: unknown) => {
      assert.ok(error instanceof WmError);
      assert.equal(error.codeName, "INVALID_ARGUMENT");
      assert.deepEqual(error.fieldViolations.map((v) => v.field), ["messages[0].parts"]);
      return true;
    });
    const anonymous = new WmClient({
      transport: createConnectTransport({ baseUrl: `http://127.0.0.1:${httpPort}`, httpVersion: "1.1" }),
    });
    await assert.rejects(anonymous.getSession("door-1"), (e: WmError) => e.codeName === "UNAUTHENTICATED");
  });
});
