// The test support's server is ready only when it is the one listening on its port: two tests
// can both find a port free, and the second server, which cannot bind it, must not be taken
// for the first (tests/ci/test_server_process.py holds the Python support to the same rule).
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";

import { listensHere, ServerProcess } from "./support.js";

test("a port another server answers on is not taken for the second server's", async () => {
  const first = await new ServerProcess().start();
  try {
    assert.equal(listensHere(process.pid, first.port), false);
    // the first answers the second's probe, but the second could not bind the port
    await assert.rejects(new ServerProcess().start(first.port), /cannot listen/);
  } finally {
    await first.stop();
  }
});

test("a plain socket on the port is this process's, not a server's", async () => {
  const other = net.createServer();
  await new Promise<void>((done) => other.listen(0, "127.0.0.1", done));
  try {
    assert.equal(listensHere(process.pid, (other.address() as net.AddressInfo).port), true);
  } finally {
    other.close();
  }
});

test("the server is ready on a socket of its own", async () => {
  const server = await new ServerProcess().start();
  try {
    assert.equal(listensHere(process.pid, server.port), false);
    await server.client().listSessions({ pageSize: 1 });
  } finally {
    await server.stop();
  }
});
