/**
 * The context engine: the three calls an agent runtime makes around its model turns.
 *
 * Why a layer over the client: a runtime does not want to think about commits. After each turn
 * it hands over the new messages (`afterTurn`); when the tokens waiting outside the keep window
 * reach a share of its context budget, a commit starts in the background and the turn goes on
 * without waiting for the working memory. Before each model call it asks for the context to
 * send (`assemble`); when it must shrink its context now, it compacts (`compact`). The same
 * flow as the Python client's engine.py, including a session whose server-side auto-commit
 * policy makes the engine leave committing to the server.
 *
 * An agent never stops because its memory is down: when the service is unreachable
 * (UNAVAILABLE, which a refused connection is, or DEADLINE_EXCEEDED) each call returns a
 * result marked `fallback` instead of throwing: afterTurn keeps the turn's messages and sends
 * them first on the next turn that reaches the service (message ids make that safe), assemble
 * hands back the runtime's own messages, and compact reports that nothing was done. One
 * warning goes to the logger when the service is lost and one note when it is back. Any other
 * error (a bad request, an unknown session) is thrown as usual.
 */

import { create, toBinary } from "@bufbuild/protobuf";

import { newRequestId, type MessageInit, type WmClient } from "./client.js";
import { WmError } from "./errors.js";
import { CommitStage, CommitState, MessageSchema, Role, type CommitEvent } from "./gen/wm/v1/resources_pb.js";
import { ContextFormat, type AssembleContextResponse } from "./gen/wm/v1/working_memory_service_pb.js";
import { sessionName } from "./names.js";
import {
  ENGINE_UNREACHABLE,
  MAX_KEEP_RECENT,
  MAX_KEEP_TURNS,
  MAX_SEEN_MESSAGES,
  MAX_TOKEN_BUDGET,
  MAX_UNSENT_MESSAGES,
  isBlank,
} from "./rules.js";
import type { CommitStream } from "./stream.js";

// The contract's largest AssembleContext budget and keep_recent_count, and the engine's own
// bound on keepRecentTurns: generated from the rules both clients share (rules.ts).
export {
  MAX_KEEP_RECENT,
  MAX_KEEP_TURNS,
  MAX_SEEN_MESSAGES,
  MAX_TOKEN_BUDGET,
  MAX_UNSENT_MESSAGES,
} from "./rules.js";

/** Where the engine reports what it did not raise (default: the console). */
export interface Logger {
  warn(message: string): void;
  info(message: string): void;
}

/** The errors that mean "the service cannot be reached now", not "the request was wrong". */
const UNREACHABLE = ENGINE_UNREACHABLE;

export function isUnreachable(error: unknown): error is WmError {
  return error instanceof WmError && UNREACHABLE.has(error.code);
}

/**
 * A commit that afterTurn started and follows to its end. Nobody has to await it; `phase1()`
 * and `wait()` tell what happened. Its error is logged, never thrown into the turn.
 */
export class BackgroundCommit {
  /** The terminal event (completed, failed or skipped); rejects with what ended the stream. */
  readonly done: Promise<CommitEvent>;
  /** Resolved once Phase 1 answered (or the attempt ended). */
  readonly firstAnswer: Promise<void>;
  private answered = false;
  private settled = false;

  constructor(
    /** The session's name. */
    readonly session: string,
    readonly stream: CommitStream,
    logger: Logger,
    after?: BackgroundCommit,
  ) {
    let markFirst: () => void = () => undefined;
    this.firstAnswer = new Promise<void>((resolve) => {
      markFirst = () => {
        this.answered = true;
        resolve();
      };
    });
    this.done = (async () => {
      try {
        // Commit only once the session's previous commit has answered Phase 1, so the two
        // never race for the same messages and archives stay in turn order.
        if (after !== undefined) await after.firstAnswer;
        for await (const event of stream) {
          void event;
          markFirst();
        }
      } finally {
        markFirst();
        this.settled = true;
      }
      return stream.wait();
    })();
    this.done.then(
      (event) =>
        logger.info(`background commit ${event.commit} ended: ${CommitState[event.state]}`),
      (error: unknown) => logger.warn(`background commit of ${session} failed: ${String(error)}`),
    );
  }

  /** The commit's name, known once Phase 1 answered. */
  get commit(): string | undefined {
    return this.stream.commit;
  }

  /** True once the server answered Phase 1 (or the attempt ended). */
  get pastPhase1(): boolean {
    return this.answered;
  }

  get finished(): boolean {
    return this.settled;
  }

  /** The Phase 1 event (archived or skipped). */
  async phase1(): Promise<CommitEvent> {
    await this.firstAnswer;
    if (this.stream.firstEvent === undefined) {
      await this.done; // throws what ended the attempt
      throw new Error("commit ended without any event");
    }
    return this.stream.firstEvent;
  }

  /** The terminal event. */
  wait(): Promise<CommitEvent> {
    return this.done;
  }
}

/** What afterTurn did. `pendingTokens` is null when nothing reached the service. */
export interface AfterTurnResult {
  /** The session's name. */
  session: string;
  addedMessageIds: string[];
  duplicateMessageIds: string[];
  pendingTokens: number | null;
  threshold: number;
  commit: BackgroundCommit | null;
  /** The commit the server started under the session's own auto-commit policy: its name ("" if none). */
  serverCommit: string;
  /** True when the service was unreachable: the messages wait in the engine for the next turn. */
  fallback: boolean;
  /** Why the engine fell back ("" otherwise). */
  fallbackReason: string;
  /** Messages of this and earlier unreachable turns not stored yet. */
  unsentMessages: number;
  /** Messages of earlier unreachable turns stored by this call (before this turn's). */
  flushedMessages: number;
}

/** A turn's batch that did not reach the service, with the request id it was sent with: a
 * re-send carries the same id, so a batch the server stored but whose answer was lost is
 * answered from its record instead of being stored twice. */
interface UnsentBatch {
  readonly messages: readonly MessageInit[];
  readonly requestId: string;
}

// What the fallback context counts a message as: its encoded size over this, as Python's
// ContextEngine counts it (a runtime's own message shape: its JSON size).
const CHARS_PER_TOKEN = 4;

function isMessageInit(message: unknown): message is MessageInit {
  const m = message as Partial<MessageInit> | null;
  return typeof m === "object" && m !== null && typeof m.role === "number" && Array.isArray(m.parts);
}

function roughTokens(message: unknown): number {
  const size = isMessageInit(message)
    ? toBinary(MessageSchema, create(MessageSchema, message)).length
    : (JSON.stringify(message, (_key, value) => (typeof value === "bigint" ? value.toString() : value))?.length ?? 0);
  return Math.max(1, Math.floor(size / CHARS_PER_TOKEN));
}

/** A user message with non-blank text of its own (not only tool results) starts a turn: the
 * service's rule (wm_core.is_request), for messages in the client's shape. */
export function isUserTurnStart(message: unknown): boolean {
  const m = message as Partial<MessageInit> | null;
  if (!m || m.role !== Role.USER || !Array.isArray(m.parts)) return false;
  return m.parts.some((p) => p?.kind?.case === "text" && typeof p.kind.value === "string" && !isBlank(p.kind.value));
}

/** The newest messages within `tokenBudget`, opening at a user turn when one fits (never on a
 * tool result whose call was cut): what Python's ContextEngine hands back too. */
export function newestWithin<M>(messages: readonly M[], tokenBudget: number): M[] {
  const chosen: M[] = [];
  let tokens = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    const cost = roughTokens(messages[i]);
    if (tokens + cost > tokenBudget) break;
    chosen.push(messages[i] as M);
    tokens += cost;
  }
  chosen.reverse();
  const start = chosen.findIndex((m) => isUserTurnStart(m));
  return start > 0 ? chosen.slice(start) : chosen;
}

/** The context for the next model call: the service's, or the runtime's own when it is down. */
export type Assembled<M> =
  | { fallback: false; response: AssembleContextResponse }
  | { fallback: true; reason: string; error: WmError; messages: readonly M[] };

export type CompactOutcome = "completed" | "skipped" | "failed" | "unavailable";

/** The outcome of compact: the new summary and the context size before and after. */
export interface CompactResult {
  /** The session's name. */
  session: string;
  outcome: CompactOutcome;
  /** The new working memory document when completed, else "". */
  summary: string;
  tokensBefore: number;
  tokensAfter: number;
  /** The commit's name ("" when none started). */
  commit: string;
  /** The archive's name ("" when nothing was archived). */
  archive: string;
  workingMemoryVersion: number;
  archivedMessageCount: number;
  /** What went wrong (failed), why nothing was archived (skipped), or the outage (unavailable). */
  error: string;
  terminal: CommitEvent | undefined;
  /** True when the service was unreachable and nothing was compacted. */
  fallback: boolean;
}

export interface AfterTurnOptions {
  /** Commit when pending tokens reach floor(tokenBudget × commitRatio); default 0.5. */
  commitRatio?: number;
  /** Keep this many newest messages instead of `keepRecentTurns` turns. */
  keepRecent?: number;
  /** Newest turns a commit keeps (default 2). */
  keepRecentTurns?: number;
}

export interface AssembleOptions<M> {
  systemPrompt?: string;
  /** Also render the context for a model API into `renderedJson` (e.g.
   * ContextFormat.ANTHROPIC_MESSAGES). */
  format?: ContextFormat;
  /** The recall tools the runtime registered (e.g. ToolExecutor.names). */
  registeredTools?: readonly string[];
  /** Recall the long-term memories relevant to the newest user request (default true). */
  recallMemories?: boolean;
  /** The runtime's own messages, handed back when the service cannot be reached (default: the
   * messages this engine was given by afterTurn, as Python's engine does). */
  ownMessages?: readonly M[];
}

/** afterTurn / assemble / compact over a WmClient (which the caller owns). */
export class ContextEngine {
  /** True while the service is unreachable (from the last call's point of view). */
  degraded = false;
  private readonly logger: Logger;
  private readonly latest = new Map<string, BackgroundCommit>();
  private readonly running = new Set<BackgroundCommit>();
  private readonly serverManaged = new Map<string, boolean>();
  private readonly unsent = new Map<string, UnsentBatch[]>();
  // The messages of each session this engine was given (at most MAX_SEEN_MESSAGES, newest):
  // the fallback context when the runtime passes no messages of its own.
  private readonly seen = new Map<string, MessageInit[]>();

  constructor(
    readonly client: WmClient,
    options: { logger?: Logger } = {},
  ) {
    this.logger = options.logger ?? console;
  }

  /** Whether the session has a server-side auto-commit policy (asked once per session;
   * `forget` asks again after an UpdateSession). */
  private async managedByServer(session: string): Promise<boolean> {
    let managed = this.serverManaged.get(session);
    if (managed === undefined) {
      const policy = (await this.client.getSession(session)).config?.autoCommit;
      const idle = policy?.idleTimeout;
      managed = Boolean(
        policy?.pendingTokenThreshold ||
          policy?.messageCountThreshold ||
          (idle !== undefined && (idle.seconds !== 0n || idle.nanos !== 0)),
      );
      this.serverManaged.set(session, managed);
    }
    return managed;
  }

  /** Asks the server again whether it commits `session` itself (its config changed). */
  forget(session: string): void {
    this.serverManaged.delete(sessionName(session));
  }

  /**
   * Adds the turn's messages in one batch (creating the session if needed); when pending
   * tokens reach floor(tokenBudget × commitRatio), starts a commit in the background keeping
   * the newest `keepRecentTurns` turns (or `keepRecent` messages) and returns without waiting.
   * A session with a server-side auto-commit policy is committed by the server (the result
   * names that commit) and never by the engine. A commit triggered while the session's
   * previous one has not answered Phase 1 starts after that answer.
   */
  async afterTurn(
    session: string,
    newMessages: readonly MessageInit[],
    tokenBudget: number,
    options: AfterTurnOptions = {},
  ): Promise<AfterTurnResult> {
    session = sessionName(session); // the key of the engine's maps, whichever way it was given
    const commitRatio = options.commitRatio ?? 0.5;
    const keepRecentTurns = options.keepRecentTurns ?? 2;
    const keepRecent = options.keepRecent;
    if (!(tokenBudget > 0)) throw new RangeError("tokenBudget must be positive");
    if (!(commitRatio >= 0 && commitRatio <= 1)) throw new RangeError("commitRatio must be between 0 and 1");
    if (keepRecent !== undefined && !(keepRecent >= 0 && keepRecent <= MAX_KEEP_RECENT)) {
      throw new RangeError(`keepRecent must be 0-${MAX_KEEP_RECENT}`);
    }
    if (keepRecent === undefined && !(keepRecentTurns >= 1 && keepRecentTurns <= MAX_KEEP_TURNS)) {
      throw new RangeError(`keepRecentTurns must be 1-${MAX_KEEP_TURNS}`);
    }
    const threshold = Math.floor(tokenBudget * commitRatio);
    this.remember(session, newMessages);
    const batch: UnsentBatch | null = newMessages.length
      ? { messages: [...newMessages], requestId: newRequestId() }
      : null;
    const result: AfterTurnResult = {
      session,
      addedMessageIds: [],
      duplicateMessageIds: [],
      pendingTokens: null,
      threshold,
      commit: null,
      serverCommit: "",
      fallback: false,
      fallbackReason: "",
      unsentMessages: 0,
      flushedMessages: 0,
    };
    let commit: BackgroundCommit | null = null;
    try {
      result.flushedMessages = await this.flush(session);
      if (batch === null) {
        this.reachable();
        return result;
      }
      const added = await this.client.addMessages(session, batch.messages, {
        createSessionIfMissing: true,
        requestId: batch.requestId,
      });
      this.reachable();
      result.addedMessageIds = added.addedMessageIds;
      result.duplicateMessageIds = added.duplicateMessageIds;
      result.pendingTokens = Number(added.pendingTokens);
      result.serverCommit = added.autoCommit;
      if (result.pendingTokens >= threshold && !(await this.managedByServer(session))) {
        const previous = this.latest.get(session);
        const stream =
          keepRecent !== undefined
            ? this.client.commit(session, keepRecent)
            : this.client.commit(session, 0, { keepRecentTurns });
        commit = new BackgroundCommit(
          session,
          stream,
          this.logger,
          previous !== undefined && !previous.pastPhase1 ? previous : undefined,
        );
        this.latest.set(session, commit);
        this.running.add(commit);
        const forget = () => this.running.delete(commit as BackgroundCommit);
        commit.done.then(forget, forget);
      }
    } catch (error) {
      if (!isUnreachable(error)) throw error;
      this.unreachable(error);
      if (batch !== null) this.queue(session, batch);
      result.fallback = true;
      result.fallbackReason = error.message;
      result.unsentMessages = this.unsentMessages(session);
    }
    result.commit = commit;
    return result;
  }

  private remember(session: string, messages: readonly MessageInit[]): void {
    const seen = [...(this.seen.get(session) ?? []), ...messages];
    this.seen.set(session, seen.slice(Math.max(0, seen.length - MAX_SEEN_MESSAGES)));
  }

  /** Keeps a batch for the service; past MAX_UNSENT_MESSAGES the oldest batches are dropped
   * with a warning (they stay in the runtime's own history, not in the service's archives). */
  private queue(session: string, batch: UnsentBatch): void {
    const waiting = [...(this.unsent.get(session) ?? []), batch];
    this.unsent.set(session, waiting);
    while (this.unsentMessages(session) > MAX_UNSENT_MESSAGES && waiting.length > 1) {
      const dropped = waiting.shift() as UnsentBatch;
      this.logger.warn(
        `${session}: dropped ${dropped.messages.length} unsent messages (more than ${MAX_UNSENT_MESSAGES} waiting for the service)`,
      );
    }
  }

  /** Messages of `session` waiting for the service. */
  unsentMessages(session: string): number {
    return (this.unsent.get(sessionName(session)) ?? []).reduce((n, batch) => n + batch.messages.length, 0);
  }

  /** Send the waiting batches of `session` in order, each with its own request id; the number
   * of messages stored. Throws what the service answered (an unreachable one leaves the rest). */
  private async flush(session: string): Promise<number> {
    const waiting = this.unsent.get(session) ?? [];
    let stored = 0;
    while (waiting.length) {
      const batch = waiting[0] as UnsentBatch;
      await this.client.addMessages(session, batch.messages, {
        createSessionIfMissing: true,
        requestId: batch.requestId,
      });
      waiting.shift();
      stored += batch.messages.length;
    }
    this.unsent.delete(session);
    if (stored) this.logger.info(`${session}: stored ${stored} messages that waited for the service`);
    return stored;
  }

  /**
   * The context for the next model call (AssembleContext). When the service is unreachable it
   * is the runtime's own messages (`ownMessages`, else those afterTurn was given), newest within
   * the budget, marked `fallback`, so the turn goes on.
   */
  async assemble<M = MessageInit>(
    session: string,
    tokenBudget: number,
    options: AssembleOptions<M> = {},
  ): Promise<Assembled<M>> {
    session = sessionName(session);
    try {
      await this.flush(session); // turns waiting for the service first, so the context has them
      const response = await this.client.assembleContext(session, tokenBudget, {
        systemPrompt: options.systemPrompt,
        format: options.format ?? ContextFormat.UNSPECIFIED,
        registeredTools: options.registeredTools,
        recallMemories: options.recallMemories ?? true,
      });
      this.reachable();
      return { fallback: false, response };
    } catch (error) {
      if (!isUnreachable(error)) throw error;
      this.unreachable(error);
      // The newest of the runtime's own messages within the budget, as Python's engine does.
      const own = options.ownMessages ?? ((this.seen.get(session) ?? []) as readonly unknown[] as readonly M[]);
      const messages = newestWithin(own, tokenBudget);
      return { fallback: true, reason: error.message, error, messages };
    }
  }

  /**
   * Archives every live message, waits for the terminal event, and returns the new summary
   * with the context size before and after (measured by AssembleContext within `tokenBudget`;
   * pass `tokensBefore` when the runtime knows it already). Unreachable: outcome "unavailable".
   */
  async compact(
    session: string,
    options: { tokenBudget?: number; tokensBefore?: number } = {},
  ): Promise<CompactResult> {
    session = sessionName(session);
    const tokenBudget = options.tokenBudget ?? MAX_TOKEN_BUDGET;
    const result: CompactResult = {
      session,
      outcome: "unavailable",
      summary: "",
      tokensBefore: options.tokensBefore ?? 0,
      tokensAfter: options.tokensBefore ?? 0,
      commit: "",
      archive: "",
      workingMemoryVersion: 0,
      archivedMessageCount: 0,
      error: "",
      terminal: undefined,
      fallback: false,
    };
    try {
      await this.flush(session); // turns waiting for the service are archived with the rest
      if (options.tokensBefore === undefined) {
        result.tokensBefore = Number((await this.client.assembleContext(session, tokenBudget)).estimatedTokens);
      }
      const stream = this.client.compact(session);
      const terminal = await stream.wait();
      const first = stream.firstEvent ?? terminal;
      result.terminal = terminal;
      result.commit = terminal.commit;
      if (first.detail.case === "phase1") {
        result.archive = first.detail.value.archive;
        result.archivedMessageCount = first.detail.value.archivedMessageCount;
      }
      if (terminal.stage === CommitStage.COMPLETED && terminal.detail.case === "completed") {
        result.outcome = "completed";
        result.workingMemoryVersion = Number(terminal.detail.value.workingMemoryVersion);
        const memory = await this.client.getWorkingMemory(session, { version: result.workingMemoryVersion });
        result.summary = memory.document;
      } else if (terminal.stage === CommitStage.FAILED) {
        result.outcome = "failed";
        const failed = terminal.detail.case === "failed" ? terminal.detail.value : undefined;
        result.error = failed?.error?.message || "Phase 2 failed";
      } else {
        result.outcome = "skipped";
        result.error = first.detail.case === "phase1" ? first.detail.value.message : "";
      }
      result.tokensAfter = Number((await this.client.assembleContext(session, tokenBudget)).estimatedTokens);
      this.reachable();
    } catch (error) {
      if (!isUnreachable(error) || result.terminal !== undefined) throw error;
      this.unreachable(error);
      result.fallback = true;
      result.error = error.message;
    }
    return result;
  }

  /** Background commits still being followed. */
  runningCommits(): BackgroundCommit[] {
    return [...this.running];
  }

  /** Waits for every running background commit: their terminal events, or what ended them. */
  waitIdle(): Promise<PromiseSettledResult<CommitEvent>[]> {
    return Promise.allSettled([...this.running].map((commit) => commit.done));
  }

  /** Stops following background commits (Phase 2 goes on on the server). */
  async close(): Promise<void> {
    const running = [...this.running];
    for (const commit of running) commit.stream.close();
    await Promise.allSettled(running.map((commit) => commit.done));
  }

  private unreachable(error: WmError): void {
    if (!this.degraded) {
      this.degraded = true;
      this.logger.warn(
        `working memory service unreachable (${error.message}); the agent goes on with its own messages`,
      );
    }
  }

  private reachable(): void {
    if (this.degraded) {
      this.degraded = false;
      this.logger.info("working memory service reachable again");
    }
  }
}
