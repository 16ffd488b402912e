/**
 * A commit's progress stream that survives broken connections.
 *
 * Why: gRPC never retries a stream once a response has arrived, and a stream can break for
 * ordinary reasons (a server restart, a proxy's idle timeout, a mesh's connection age). The
 * server stores every event with a per-commit sequence, so the stream keeps the last sequence
 * it delivered and, on a break, calls WatchCommit(after_sequence = last) and carries on;
 * replayed events at or below it are dropped, so the caller sees each event once, in order,
 * ending with exactly one terminal event. A commit started by the client (commit(),
 * compact()) begins with the unary CreateCommit (or CompactSession), which returns the commit
 * once Phase 1 is stored; the stream then watches it. When that start fails on the way, it is
 * repeated with the same request_id, which the server answers with the same commit. The same
 * design as the Python client's stream.py.
 *
 * Only transport failures resume (UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED of one stream,
 * and INTERNAL/UNKNOWN without the service's ErrorInfo); an answer of the service is thrown at
 * once.
 */
import { Code } from "@connectrpc/connect";

import { ERROR_DOMAIN, WmError, toWmError } from "./errors.js";
import { CommitStage, type Commit, type CommitEvent } from "./gen/wm/v1/resources_pb.js";
import { RESUME, STREAM_ALWAYS_RESUMABLE, STREAM_RESUMABLE_FROM_TRANSPORT } from "./rules.js";

/** Opens one attempt (WatchCommit): the commit's name, the last sequence delivered. */
export type Opener = (commit: string, afterSequence: bigint, signal: AbortSignal) => AsyncIterable<CommitEvent>;
/** Starts the commit (CreateCommit or CompactSession, with one request_id for every attempt). */
export type Starter = (signal: AbortSignal) => Promise<Commit>;
/** Whether the commit has ended with no stored event after the given sequence (GetCommit). */
export type Finished = (commit: string, afterSequence: bigint) => Promise<boolean>;

/**
 * How a broken stream is resumed. `idleTimeoutMs`: with no event (heartbeats included) for
 * this long the stream is taken for dead and re-opened (the server sends a heartbeat at least
 * every 15 s). `giveUpAfterMs`: how long to keep re-attaching without receiving anything
 * before throwing UNAVAILABLE. Backoff grows by `multiplier` up to `maxBackoffMs`.
 */
export interface ResumePolicy {
  idleTimeoutMs: number;
  giveUpAfterMs: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  multiplier: number;
}

export const DEFAULT_RESUME_POLICY: Readonly<ResumePolicy> = RESUME;

const ALWAYS_RESUMABLE = STREAM_ALWAYS_RESUMABLE;
const RESUMABLE_FROM_TRANSPORT = STREAM_RESUMABLE_FROM_TRANSPORT;

/** True for a failure of the connection rather than an answer of the service. */
export function isResumable(error: WmError): boolean {
  if (ALWAYS_RESUMABLE.has(error.code)) return true;
  return RESUMABLE_FROM_TRANSPORT.has(error.code) && error.domain !== ERROR_DOMAIN;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const IDLE = Symbol("idle");

/**
 * The events of one commit, resumed across disconnects; an async iterable (read it once).
 * Heartbeats are skipped unless `heartbeats` is true. Closing it never cancels Phase 2.
 */
export class CommitStream implements AsyncIterableIterator<CommitEvent> {
  /** The session's name. */
  readonly session: string;
  /** The commit's name ("sessions/{s}/commits/{c}"); undefined until the start answered. */
  commit: string | undefined;
  /** The Commit the start (CreateCommit or CompactSession) returned; undefined for a watch. */
  started: Commit | undefined;
  lastSequence: bigint;
  firstEvent: CommitEvent | undefined;
  terminal: CommitEvent | undefined;
  /** Attempts re-opened after a break. */
  resumes = 0;
  /** The latest reasons for resuming (at most 50). */
  readonly errors: WmError[] = [];
  private readonly open: Opener;
  private readonly start: Starter | undefined;
  private readonly finished: Finished | undefined;
  private readonly heartbeats: boolean;
  private readonly policy: ResumePolicy;
  private call: { iterator: AsyncIterator<CommitEvent>; abort: AbortController } | undefined;
  private closed = false;
  // The start in flight, aborted by close().
  private pending: AbortController | undefined;

  constructor(
    open: Opener,
    options: {
      session: string;
      /** The commit to watch; without it, `start` makes one. */
      commit?: string;
      start?: Starter;
      afterSequence?: bigint;
      heartbeats?: boolean;
      policy?: Partial<ResumePolicy>;
      finished?: Finished;
    },
  ) {
    this.open = open;
    if (options.commit === undefined && options.start === undefined) {
      throw new RangeError("a commit stream needs the commit to watch or a way to start one");
    }
    this.session = options.session;
    this.commit = options.commit;
    this.start = options.start;
    this.lastSequence = options.afterSequence ?? 0n;
    this.heartbeats = options.heartbeats ?? false;
    this.policy = { ...DEFAULT_RESUME_POLICY, ...options.policy };
    this.finished = options.finished;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<CommitEvent, undefined>> {
    for (;;) {
      if (this.terminal !== undefined || this.closed) {
        this.cancelCall();
        return { done: true, value: undefined };
      }
      const event = await this.nextRaw();
      if (event === undefined) {
        this.closed = true; // the commit had ended before afterSequence: nothing more
        return { done: true, value: undefined };
      }
      if (event.stage === CommitStage.HEARTBEAT) {
        if (this.heartbeats) return { done: false, value: event };
        continue;
      }
      if (event.sequence <= this.lastSequence) continue; // replayed after a resume
      this.lastSequence = event.sequence;
      this.commit ??= event.commit;
      this.firstEvent ??= event;
      if (event.terminal) this.terminal = event;
      return { done: false, value: event };
    }
  }

  /** Stop reading (for `for await ... break`). Phase 2 goes on on the server. */
  async return(): Promise<IteratorResult<CommitEvent, undefined>> {
    this.close();
    return { done: true, value: undefined };
  }

  /** Stop reading; WatchCommit can re-attach later. */
  close(): void {
    this.closed = true;
    this.cancelCall();
  }

  /** The first event (the Phase 1 outcome); the stream can be read on afterwards. */
  async phase1(): Promise<CommitEvent> {
    if (this.firstEvent === undefined) await this.next();
    if (this.firstEvent === undefined) throw new Error("the commit stream ended without any event");
    return this.firstEvent;
  }

  /** Reads to the terminal event (completed, failed or skipped) and returns it. */
  async wait(): Promise<CommitEvent> {
    while (!(await this.next()).done) {
      // every event up to the terminal one
    }
    if (this.terminal === undefined) {
      throw new Error(
        "no terminal event: the stream was closed, or it started after the commit's terminal sequence",
      );
    }
    return this.terminal;
  }

  /** Every remaining event up to and including the terminal one. */
  async collect(): Promise<CommitEvent[]> {
    const events: CommitEvent[] = [];
    for await (const event of this) events.push(event);
    return events;
  }

  /** The next message of the current attempt, re-opening attempts as needed; undefined when
   * the server has nothing after our sequence for a commit that has ended. */
  private async nextRaw(): Promise<CommitEvent | undefined> {
    let brokenSince: number | undefined;
    let backoff = this.policy.initialBackoffMs;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      try {
        if (this.call === undefined) {
          const abort = new AbortController();
          this.pending = abort;
          if (this.commit === undefined) {
            this.started = await (this.start as Starter)(abort.signal);
            this.commit = this.started.name;
          }
          const iterable = this.open(this.commit, this.lastSequence, abort.signal);
          this.call = { iterator: iterable[Symbol.asyncIterator](), abort };
          this.pending = undefined;
        }
        const call = this.call;
        const idle = new Promise<typeof IDLE>((resolve) => {
          timer = setTimeout(() => resolve(IDLE), this.policy.idleTimeoutMs);
        });
        const result = await Promise.race([call.iterator.next(), idle]);
        if (result === IDLE) {
          this.cancelCall();
          this.remember(
            new WmError(Code.Unavailable, `no event for ${this.policy.idleTimeoutMs} ms; re-attaching`),
          );
        } else if (!result.done) {
          return result.value;
        } else {
          // Ended before the terminal event (the server's stream lifetime cap, a graceful
          // shutdown), or the commit ended before afterSequence.
          this.call = undefined;
          if (
            this.finished !== undefined &&
            this.commit !== undefined &&
            (await this.finished(this.commit, this.lastSequence))
          ) {
            return undefined;
          }
        }
      } catch (raw) {
        if (this.closed) throw new WmError(Code.Canceled, "the commit stream was closed");
        const error = toWmError(raw);
        this.cancelCall();
        if (!isResumable(error)) throw error;
        this.remember(error);
      } finally {
        clearTimeout(timer);
      }
      const now = Date.now();
      brokenSince ??= now;
      if (now - brokenSince > this.policy.giveUpAfterMs) {
        const last = this.errors.at(-1);
        throw new WmError(
          Code.Unavailable,
          `commit stream lost and not resumed within ${this.policy.giveUpAfterMs} ms` +
            (last ? `: ${last.rawMessage}` : ""),
        );
      }
      this.resumes += 1;
      await sleep(backoff);
      backoff = Math.min(backoff * this.policy.multiplier, this.policy.maxBackoffMs);
    }
  }

  private remember(error: WmError): void {
    this.errors.push(error);
    if (this.errors.length > 50) this.errors.shift();
  }

  private cancelCall(): void {
    this.pending?.abort();
    this.pending = undefined;
    const call = this.call;
    this.call = undefined;
    if (call !== undefined) {
      call.abort.abort();
      // One more read lets connect see the abort and clear the call's deadline timer (its
      // iterator has no return()); the rejection it gets is the abort itself.
      call.iterator.next().then(
        () => undefined,
        () => undefined,
      );
    }
  }
}
