// The real Python server on a free loopback port, and a TCP proxy in front of it that a test
// can make drop connections: the tools of the end-to-end tests.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { WmClient, WmError, type WmClientOptions } from "../src/index.js";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

export function python(): string {
  if (process.env.WM_PYTHON) return process.env.WM_PYTHON;
  const venv = join(REPO, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

/** Whether one of process `pid`'s sockets listens on `port` (Linux's /proc: the LISTEN rows of
 * /proc/net/tcp and tcp6 by inode, against the process's open sockets); true where /proc
 * cannot tell. Two tests can both find a port free: the second server cannot bind it, and
 * the first, a wm server too, would answer the second's probe. */
export function listensHere(pid: number, port: number): boolean {
  if (!existsSync("/proc/self/fd")) return true;
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false; // the process has gone
  }
  const own = new Set<string>();
  for (const fd of fds) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (target.startsWith("socket:[")) own.add(target.slice("socket:[".length, -1));
    } catch {
      // closed meanwhile
    }
  }
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const rows = existsSync(table) ? readFileSync(table, "utf8").split("\n").slice(1) : [];
    for (const row of rows) {
      const [, local, , state, , , , , , inode] = row.trim().split(/\s+/);
      const listening = state === "0A" && parseInt(local?.split(":").pop() ?? "", 16) === port;
      if (listening && inode !== undefined && own.has(inode)) return true;
    }
  }
  return false;
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = net.createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as net.AddressInfo;
      server.close(() => done(address.port));
    });
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The seven sections of a working memory, for a scripted model's answer. */
export const SECTIONS = [
  "Session Title",
  "Current State",
  "Task & Goals",
  "Key Facts & Decisions",
  "Files & Context",
  "Errors & Corrections",
  "Open Issues",
];

/** `python -m wm_server` with its own data folder; `env` adds WM_* settings. */
export class ServerProcess {
  readonly dataDir = mkdtempSync(join(tmpdir(), "wm-ts-e2e-"));
  port = 0;
  log = "";
  private child: ChildProcess | undefined;

  /** WM_* settings, on top of the offline provider; may be changed until start(). */
  constructor(readonly env: Record<string, string> = {}) {}

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Writes a file into the data folder (e.g. a scripted model's answers) and returns its path. */
  file(name: string, text: string): string {
    const path = join(this.dataDir, name);
    writeFileSync(path, text);
    return path;
  }

  /** Starts the server on `port` (default: a free one) and waits until it answers. A free
   * port can be taken between the probe and the server's bind (the other tiers open
   * connections meanwhile): one of our choosing is chosen again, up to five times. */
  async start(port?: number): Promise<this> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.launch(port ?? (await freePort()));
      } catch (error) {
        const taken = String(error).includes("WM_ADDRESS: cannot listen");
        if (port !== undefined || !taken || attempt >= 5) throw error;
        this.log = "";
      }
    }
  }

  private async launch(port: number): Promise<this> {
    this.port = port;
    const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("WM_")));
    const child = spawn(python(), ["-m", "wm_server"], {
      cwd: REPO,
      env: {
        ...inherited,
        WM_ADDRESS: this.address,
        WM_DATA_DIR: this.dataDir,
        WM_LLM_PROVIDER: "offline",
        ...this.env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (chunk: Buffer) => (this.log += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (this.log += chunk.toString()));
    this.child = child;
    const probe = new WmClient({ address: this.address, timeoutMs: 1000 });
    try {
      for (let waited = 0; ; waited += 100) {
        if (child.exitCode !== null) throw new Error(`the server exited:\n${this.log}`);
        let failure: unknown = "no answer";
        try {
          await probe.listSessions({ pageSize: 1 });
          failure = undefined;
        } catch (error) {
          if (error instanceof WmError && error.fromService) failure = undefined; // it answered
          else failure = error;
        }
        // An answer may come from another test's server given the same free port first.
        if (failure === undefined && listensHere(child.pid ?? -1, port)) return this;
        if (waited > 30_000) throw new Error(`the server did not start: ${String(failure)}\n${this.log}`);
        await sleep(100);
      }
    } finally {
      probe.close();
    }
  }

  client(options: WmClientOptions = {}): WmClient {
    return new WmClient({ address: this.address, ...options });
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/**
 * A TCP proxy on loopback that records what clients send on each connection. `dropNext(n)`
 * makes it take the next n connections, read until `until` matches what the client sent,
 * and then reset them without forwarding a byte; `cutAll()` resets every open connection.
 */
export class TcpProxy {
  port = 0;
  /** The bytes each client connection sent, in order of connection. */
  readonly received: Buffer[] = [];
  private readonly server: net.Server;
  private readonly open = new Set<net.Socket>();
  private drops: Array<RegExp> = [];

  constructor(private readonly target: number) {
    this.server = net.createServer((client) => this.accept(client));
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as net.AddressInfo).port;
    return this;
  }

  /** Drop the next connection once its client has sent bytes matching `until`. */
  dropNext(until: RegExp): void {
    this.drops.push(until);
  }

  cutAll(): void {
    for (const socket of this.open) socket.resetAndDestroy();
  }

  async stop(): Promise<void> {
    this.cutAll();
    await new Promise((r) => this.server.close(r));
  }

  private accept(client: net.Socket): void {
    const index = this.received.length;
    this.received.push(Buffer.alloc(0));
    this.open.add(client);
    client.on("close", () => this.open.delete(client));
    client.on("error", () => undefined);
    const record = (chunk: Buffer) => (this.received[index] = Buffer.concat([this.received[index] ?? Buffer.alloc(0), chunk]));
    const drop = this.drops.shift();
    if (drop !== undefined) {
      client.on("data", (chunk: Buffer) => {
        record(chunk);
        if (drop.test((this.received[index] ?? Buffer.alloc(0)).toString("latin1"))) client.resetAndDestroy();
      });
      return;
    }
    const upstream = net.connect(this.target, "127.0.0.1");
    this.open.add(upstream);
    upstream.on("close", () => {
      this.open.delete(upstream);
      client.destroy();
    });
    upstream.on("error", () => client.destroy());
    client.on("close", () => upstream.destroy());
    client.on("data", (chunk: Buffer) => {
      record(chunk);
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
  }
}

/** UUIDs in what a client sent (request ids travel as plain protobuf strings). */
export function uuids(bytes: Buffer | undefined): string[] {
  return (bytes ?? Buffer.alloc(0)).toString("latin1").match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g) ?? [];
}
