/**
 * The typed client of wm.v1.WorkingMemoryService over connect-node's gRPC transport (HTTP/2).
 *
 * Why a wrapper over the generated service: every mutating call gets a request_id, made once
 * per logical call and sent again on every retry (so a retry of UNAVAILABLE never stores
 * twice); unary calls are retried and timed as the shared service config says (connect-node
 * has no service config of its own); errors come out as WmError with decoded details; commit
 * streams resume by themselves. Requests are built here from plain arguments; responses are
 * the generated wm.v1 messages (int64 fields are bigint).
 */
import { randomUUID } from "node:crypto";

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, type CallOptions, type Client, type Transport } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import { backoffMs, loadServiceConfig, methodPolicies, type MethodPolicy, type ServiceConfig } from "./config.js";
import { toWmError } from "./errors.js";
import {
  CommitState,
  MemoryState,
  type Archive,
  type Memory,
  type MemoryType,
  type Commit,
  type CommitEvent,
  type MessageSchema,
  type PartSchema,
  type SectionOpSchema,
  type Session,
  type SessionConfigSchema,
  type WorkingMemory,
} from "./gen/wm/v1/resources_pb.js";
import {
  ContextFormat,
  SearchMode,
  ToolFormat,
  WorkingMemoryService,
  type AddMessagesResponse,
  type ApplyWorkingMemoryOpsResponse,
  type AssembleContextResponse,
  type GetToolDefinitionsResponse,
  type CreateMemoryResponse,
  type GetToolOutputResponse,
  type ListMemoriesResponse,
  type PurgeUserDataResponse,
  type MemoryOwnerSchema,
  type SearchMemoriesResponse,
  type ListArchivesResponse,
  type ListCommitsResponse,
  type ListMessagesResponse,
  type RemoveRecentMessagesResponse,
  type ListSessionsResponse,
  type SearchArchivesResponse,
  type SearchToolOutputsResponse,
} from "./gen/wm/v1/working_memory_service_pb.js";
import { CommitStream, type ResumePolicy } from "./stream.js";

export const DEFAULT_PORT = 50051;
export const DEFAULT_ADDRESS = `127.0.0.1:${DEFAULT_PORT}`;
/** Large enough for an assembled context or an archive page with its raw messages. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

export type MessageInit = MessageInitShape<typeof MessageSchema>;
export type PartInit = MessageInitShape<typeof PartSchema>;
/** Whose long-term memories: a user, an agent, or the owner of a session. */
export type MemoryOwnerInit = MessageInitShape<typeof MemoryOwnerSchema>;
export type SessionConfigInit = MessageInitShape<typeof SessionConfigSchema>;
export type SectionOpInit = MessageInitShape<typeof SectionOpSchema>;
type Int = number | bigint;

const TERMINAL_STATES = new Set([CommitState.COMPLETED, CommitState.FAILED, CommitState.SKIPPED]);

/** A fresh idempotency key (a UUID, as the contract recommends). */
export function newRequestId(): string {
  return randomUUID();
}

/**
 * Turns a listening address into a base URL a client can dial: wildcard hosts become loopback
 * and a bare host gets the default port. `http://` and `https://` URLs are taken as they are.
 */
export function baseUrl(address: string): string {
  let value = address.trim();
  if (/^https?:\/\//.test(value)) return value;
  if (value.startsWith("[")) {
    if (!value.includes("]:")) value = `${value}:${DEFAULT_PORT}`;
  } else if ((value.match(/:/g) ?? []).length > 1) {
    value = `[${value}]:${DEFAULT_PORT}`;
  } else if (!value.includes(":")) {
    value = `${value}:${DEFAULT_PORT}`;
  }
  const cut = value.lastIndexOf(":");
  const host = value.slice(0, cut);
  if (host === "0.0.0.0" || host === "[::]" || host === "") value = `127.0.0.1${value.slice(cut)}`;
  return `http://${value}`;
}

export interface WmClientOptions {
  /** host:port or a URL (default: WM_ADDRESS, else 127.0.0.1:50051). */
  address?: string;
  /** Sends `authorization: Bearer <key>` with every call (a server that requires API keys). */
  apiKey?: string;
  /** Extra headers sent with every call. */
  headers?: Record<string, string>;
  /** A deadline for every call in milliseconds, instead of the service config's per method. */
  timeoutMs?: number;
  /** The service config to follow (default: the one the package ships, see config.ts). */
  serviceConfig?: ServiceConfig;
  /** How commit streams resume after a break. */
  resumePolicy?: Partial<ResumePolicy>;
  /** A transport of your own (e.g. connect-node's createConnectTransport for the HTTP door). */
  transport?: Transport;
}

type Service = Client<typeof WorkingMemoryService>;
type UnaryName = {
  [K in keyof Service]: Service[K] extends (request: never, options?: CallOptions) => Promise<unknown> ? K : never;
}[keyof Service];

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** One connection to the service and a method per RPC. Call `close()` when done. */
export class WmClient {
  readonly baseUrl: string;
  readonly resumePolicy: Partial<ResumePolicy>;
  private readonly service: Service;
  private readonly sessions: Http2SessionManager | undefined;
  private readonly policies: Map<string, MethodPolicy>;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number | undefined;

  constructor(options: WmClientOptions = {}) {
    this.baseUrl = baseUrl(options.address ?? (process.env.WM_ADDRESS?.trim() || DEFAULT_ADDRESS));
    this.policies = methodPolicies(options.serviceConfig ?? loadServiceConfig());
    this.headers = { ...options.headers };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    this.timeoutMs = options.timeoutMs;
    this.resumePolicy = { ...options.resumePolicy };
    let transport = options.transport;
    if (transport === undefined) {
      this.sessions = new Http2SessionManager(this.baseUrl);
      transport = createGrpcTransport({
        baseUrl: this.baseUrl,
        sessionManager: this.sessions,
        readMaxBytes: MAX_MESSAGE_BYTES,
        writeMaxBytes: MAX_MESSAGE_BYTES,
      });
    }
    this.service = createClient(WorkingMemoryService, transport);
  }

  /** Closes the client's HTTP/2 connection (a transport given in the options is the caller's). */
  close(): void {
    this.sessions?.abort();
  }

  // --- sessions ---------------------------------------------------------------------------------
  /** Creates a session (the server makes an id when `sessionId` is empty); fields of `config`
   * left unset take the server's default; `userId` (else `agentId`) owns the long-term
   * memories the session makes and recalls. */
  createSession(
    sessionId = "",
    options: { config?: SessionConfigInit; userId?: string; agentId?: string; requestId?: string } = {},
  ): Promise<Session> {
    return this.unary("createSession", {
      sessionId,
      config: options.config,
      userId: options.userId ?? "",
      agentId: options.agentId ?? "",
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Changes the session's config: the fields `paths` names (e.g. "config.auto_commit.idle_timeout"),
   * or with no paths every field set in `config`. */
  updateSession(
    sessionId: string,
    config: SessionConfigInit,
    paths: string[] = [],
    options: { requestId?: string } = {},
  ): Promise<Session> {
    return this.unary("updateSession", {
      session: { sessionId, config },
      updateMask: { paths },
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** A session and its counters (pendingTokens, liveTokens, workingMemoryVersion...). */
  getSession(sessionId: string): Promise<Session> {
    return this.unary("getSession", { sessionId });
  }

  /** One page of sessions, newest first. */
  listSessions(options: { pageSize?: number; pageToken?: string } = {}): Promise<ListSessionsResponse> {
    return this.unary("listSessions", { pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" });
  }

  /** Every session, newest first, page after page. */
  async *iterSessions(pageSize = 100): AsyncGenerator<Session> {
    let pageToken = "";
    do {
      const page = await this.listSessions({ pageSize, pageToken });
      yield* page.sessions;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** Deletes a session and everything of it. */
  async deleteSession(sessionId: string, options: { requestId?: string } = {}): Promise<void> {
    await this.unary("deleteSession", { sessionId, requestId: options.requestId ?? newRequestId() });
  }

  /** Adds 1-1000 messages atomically; ids already stored come back as duplicates. */
  addMessages(
    sessionId: string,
    messages: readonly MessageInit[],
    options: { createSessionIfMissing?: boolean; requestId?: string } = {},
  ): Promise<AddMessagesResponse> {
    return this.unary("addMessages", {
      sessionId,
      messages: [...messages],
      createSessionIfMissing: options.createSessionIfMissing ?? false,
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** One page of the session's live messages, oldest first (follow nextPageToken). */
  listMessages(sessionId: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListMessagesResponse> {
    return this.unary("listMessages", { sessionId, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" });
  }

  /**
   * Takes back the newest `count` (1-100) live messages and returns them, oldest first; a
   * FAILED_PRECONDITION error (reason MESSAGES_NOT_LIVE) when fewer are live (archived
   * messages stay). A retry with the same `requestId` returns the same messages.
   */
  removeRecentMessages(
    sessionId: string,
    count = 1,
    options: { requestId?: string } = {},
  ): Promise<RemoveRecentMessagesResponse> {
    return this.unary("removeRecentMessages", { sessionId, count, requestId: options.requestId ?? newRequestId() });
  }

  // --- commits ----------------------------------------------------------------------------------
  /**
   * Starts a commit keeping the newest `keepRecentCount` messages (or, with `keepRecentTurns`,
   * the newest turns); the stream yields its events (Phase 1 first) and resumes itself after
   * a disconnect. Nothing is sent until the stream is first read.
   */
  commit(
    sessionId: string,
    keepRecentCount = 0,
    options: { keepRecentTurns?: number; requestId?: string; heartbeats?: boolean } = {},
  ): CommitStream {
    const requestId = options.requestId ?? newRequestId();
    return this.commitStream(sessionId, options.heartbeats, (signal) =>
      this.service.commit(
        { sessionId, keepRecentCount, keepRecentTurns: options.keepRecentTurns ?? 0, requestId },
        this.callOptions("Commit", signal),
      ),
    );
  }

  /** Commits with keep 0 (archives every live message); the stream runs to Phase 2's end. */
  compact(sessionId: string, options: { requestId?: string; heartbeats?: boolean } = {}): CommitStream {
    const requestId = options.requestId ?? newRequestId();
    return this.commitStream(sessionId, options.heartbeats, (signal) =>
      this.service.compact({ sessionId, requestId }, this.callOptions("Compact", signal)),
    );
  }

  /** Re-attaches to a commit: stored events after `afterSequence`, then live ones. */
  watchCommit(
    sessionId: string,
    commitId: string,
    options: { afterSequence?: Int; heartbeats?: boolean } = {},
  ): CommitStream {
    return new CommitStream((cid, after, signal) => this.watchCall(sessionId, cid ?? commitId, after, signal), {
      sessionId,
      commitId,
      afterSequence: BigInt(options.afterSequence ?? 0),
      heartbeats: options.heartbeats ?? false,
      policy: this.resumePolicy,
      finished: this.finishedProbe(sessionId),
    });
  }

  /** A commit's current state. */
  getCommit(sessionId: string, commitId: string): Promise<Commit> {
    return this.unary("getCommit", { sessionId, commitId });
  }

  /** One page of a session's commits, newest first. */
  listCommits(sessionId: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListCommitsResponse> {
    return this.unary("listCommits", { sessionId, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" });
  }

  /** Runs Phase 2 of a failed commit again (watch it with watchCommit). */
  retryCommit(sessionId: string, commitId: string, options: { requestId?: string } = {}): Promise<Commit> {
    return this.unary("retryCommit", { sessionId, commitId, requestId: options.requestId ?? newRequestId() });
  }

  // --- working memory ---------------------------------------------------------------------------
  /** The latest completed working memory, or `version`; NOT_FOUND when there is none. */
  getWorkingMemory(sessionId: string, options: { version?: Int } = {}): Promise<WorkingMemory> {
    return this.unary("getWorkingMemory", { sessionId, version: BigInt(options.version ?? 0) });
  }

  /** Applies ops computed by the caller's own model, through the server's guards. */
  applyWorkingMemoryOps(
    sessionId: string,
    ops: readonly SectionOpInit[],
    options: { expectedVersion?: Int; requestId?: string } = {},
  ): Promise<ApplyWorkingMemoryOpsResponse> {
    return this.unary("applyWorkingMemoryOps", {
      sessionId,
      ops: [...ops],
      expectedVersion: BigInt(options.expectedVersion ?? 0),
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** The next model context within `tokenBudget` tokens; with `registeredTools` (e.g.
   * ToolExecutor.names) its system-prompt addition names only those tools; with
   * `recallMemories`, it ends with the long-term memories relevant to the newest user request
   * (within `memoryTokenBudget`, 0: the server's default). */
  assembleContext(
    sessionId: string,
    tokenBudget: Int,
    options: {
      systemPrompt?: string;
      includeAnthropicJson?: boolean;
      registeredTools?: readonly string[];
      recallMemories?: boolean;
      memoryTokenBudget?: Int;
      /** Also render the context for a model API into `renderedJson` (e.g.
       * ContextFormat.OPENAI_CHAT_COMPLETIONS). */
      format?: ContextFormat;
    } = {},
  ): Promise<AssembleContextResponse> {
    return this.unary("assembleContext", {
      format: options.format ?? ContextFormat.UNSPECIFIED,
      memoryRecall: options.recallMemories
        ? { enabled: true, tokenBudget: BigInt(options.memoryTokenBudget ?? 0) }
        : undefined,
      sessionId,
      tokenBudget: BigInt(tokenBudget),
      systemPrompt: options.systemPrompt ?? "",
      includeAnthropicJson: options.includeAnthropicJson ?? false,
      // Set, even when empty: an empty list means no tools at all.
      registeredTools: options.registeredTools ? { names: [...options.registeredTools] } : undefined,
    });
  }

  // --- archives ---------------------------------------------------------------------------------
  /** One page of a session's archives, oldest first, without messages. */
  listArchives(sessionId: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListArchivesResponse> {
    return this.unary("listArchives", { sessionId, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" });
  }

  /** One archive with one page of its raw messages; follow nextMessagesPageToken, or use
   * iterArchiveMessages. */
  getArchive(
    sessionId: string,
    archiveId: string,
    options: { pageSize?: number; pageToken?: string } = {},
  ): Promise<Archive> {
    return this.unary("getArchive", {
      sessionId,
      archiveId,
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** Every message of an archive, page after page. */
  async *iterArchiveMessages(sessionId: string, archiveId: string, pageSize = 0) {
    let pageToken = "";
    do {
      const page = await this.getArchive(sessionId, archiveId, { pageSize, pageToken });
      yield* page.messages;
      pageToken = page.nextMessagesPageToken;
    } while (pageToken);
  }

  /** Search over archived messages: literal and case-insensitive (newest archive first), or
   * `ranked` by BM25 (best first), or any `mode` of the contract (wins over `ranked`; HYBRID
   * fuses BM25 with recall by meaning, hits at or above `minScore`); across the tenant's
   * sessions, or those of `userId` / `agentId`, with `allSessions`. */
  searchArchives(
    query: string,
    options: {
      sessionId?: string;
      archiveId?: string;
      maxHits?: number;
      allSessions?: boolean;
      ranked?: boolean;
      mode?: SearchMode;
      minScore?: number;
      userId?: string;
      agentId?: string;
    } = {},
  ): Promise<SearchArchivesResponse> {
    return this.unary("searchArchives", {
      mode: options.mode ?? (options.ranked ? SearchMode.RANKED : SearchMode.UNSPECIFIED),
      minScore: options.minScore ?? 0,
      userId: options.userId ?? "",
      agentId: options.agentId ?? "",
      query,
      sessionId: options.sessionId ?? "",
      archiveId: options.archiveId ?? "",
      maxHits: options.maxHits ?? 0,
      allSessions: options.allSessions ?? false,
    });
  }

  // --- long-term memories ----------------------------------------------------------------------
  /** An owner's active memories ranked against `query`, best first; with
   * `includeSuperseded`, the memories newer ones replaced too, ranked below them. */
  searchMemories(
    query: string,
    options: { owner: MemoryOwnerInit; types?: MemoryType[]; limit?: number; includeSuperseded?: boolean },
  ): Promise<SearchMemoriesResponse> {
    return this.unary("searchMemories", {
      owner: options.owner,
      query,
      types: options.types ?? [],
      limit: options.limit ?? 0,
      includeSuperseded: options.includeSuperseded ?? false,
    });
  }

  /** One page of an owner's memories, newest first. */
  listMemories(options: {
    owner: MemoryOwnerInit;
    types?: MemoryType[];
    state?: MemoryState;
    pageSize?: number;
    pageToken?: string;
  }): Promise<ListMemoriesResponse> {
    return this.unary("listMemories", {
      owner: options.owner,
      types: options.types ?? [],
      state: options.state ?? MemoryState.UNSPECIFIED,
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** One memory with its history. */
  getMemory(memoryId: string): Promise<Memory> {
    return this.unary("getMemory", { memoryId });
  }

  /** Stores a memory (or finds the owner's active one that says the same). `supersedes`: ids
   * of the owner's active memories it replaces (they become SUPERSEDED, valid until this one);
   * `expireTime`: when to forget it. */
  createMemory(
    owner: MemoryOwnerInit,
    type: MemoryType,
    text: string,
    options: { requestId?: string; supersedes?: string[]; expireTime?: Date } = {},
  ): Promise<CreateMemoryResponse> {
    return this.unary("createMemory", {
      owner,
      memory: {
        type,
        text,
        supersedesMemoryIds: options.supersedes ?? [],
        ...(options.expireTime ? { expireTime: timestampFromDate(options.expireTime) } : {}),
      },
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Corrects a memory: writes the fields given (the superseded version stays in its history
   * with `reason`; empty: "user correction"). */
  updateMemory(
    memoryId: string,
    changes: { text?: string; type?: MemoryType; expireTime?: Date },
    options: { reason?: string; requestId?: string } = {},
  ): Promise<Memory> {
    const paths = [
      ...(changes.text !== undefined ? ["text"] : []),
      ...(changes.type !== undefined ? ["type"] : []),
      ...(changes.expireTime !== undefined ? ["expire_time"] : []),
    ];
    if (!paths.length) throw new RangeError("updateMemory needs text, type or expireTime");
    const { expireTime, ...content } = changes;
    return this.unary("updateMemory", {
      memory: { memoryId, ...content, ...(expireTime ? { expireTime: timestampFromDate(expireTime) } : {}) },
      updateMask: { paths },
      reason: options.reason ?? "",
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Forgets a memory: store, index and history. */
  async deleteMemory(memoryId: string, options: { requestId?: string } = {}): Promise<void> {
    await this.unary("deleteMemory", { memoryId, requestId: options.requestId ?? newRequestId() });
  }

  /** Retires a memory that no longer holds: kept with `reason`, no longer recalled. */
  retireMemory(memoryId: string, reason: string, options: { requestId?: string } = {}): Promise<Memory> {
    return this.unary("retireMemory", { memoryId, reason, requestId: options.requestId ?? newRequestId() });
  }

  /** Forgets a user: every memory they own and every session created with their userId
   * (messages, archives, tool outputs); the counts removed. */
  purgeUserData(userId: string, options: { requestId?: string } = {}): Promise<PurgeUserDataResponse> {
    return this.unary("purgeUserData", { userId, requestId: options.requestId ?? newRequestId() });
  }

  // --- tool outputs -----------------------------------------------------------------------------
  /** One page of a stored tool output: lines from `startLine` (1-based), or bytes when
   * `byteOffset` is given; `pageToken` continues a range. */
  getToolOutput(
    sessionId: string,
    outputId: string,
    options: { startLine?: Int; lineCount?: Int; byteOffset?: Int; byteLength?: Int; pageToken?: string } = {},
  ): Promise<GetToolOutputResponse> {
    const range =
      options.byteOffset !== undefined
        ? { case: "bytes" as const, value: { offset: BigInt(options.byteOffset), length: BigInt(options.byteLength ?? 0) } }
        : {
            case: "lines" as const,
            value: { start: BigInt(options.startLine ?? 0), count: BigInt(options.lineCount ?? 0) },
          };
    return this.unary("getToolOutput", { sessionId, outputId, range, pageToken: options.pageToken ?? "" });
  }

  /** Literal, case-insensitive search over the session's stored tool outputs, by line. */
  searchToolOutputs(
    sessionId: string,
    query: string,
    options: { outputId?: string; maxHits?: number } = {},
  ): Promise<SearchToolOutputsResponse> {
    return this.unary("searchToolOutputs", {
      sessionId,
      query,
      outputId: options.outputId ?? "",
      maxHits: options.maxHits ?? 0,
    });
  }

  /** The recall tools' definitions (and update_working_memory), ready to register. */
  getToolDefinitions(format: ToolFormat = ToolFormat.UNSPECIFIED): Promise<GetToolDefinitionsResponse> {
    return this.unary("getToolDefinitions", { format });
  }

  // --- plumbing ---------------------------------------------------------------------------------
  private callOptions(method: string, signal?: AbortSignal): CallOptions {
    const timeoutMs = this.timeoutMs ?? this.policies.get(method)?.timeoutMs;
    return { headers: this.headers, timeoutMs, signal };
  }

  /**
   * One logical unary call: the request is built once (so its request_id is the same on every
   * attempt) and retried on the service config's codes with its backoff, within one deadline.
   */
  private async unary<M extends UnaryName>(
    name: M,
    request: Parameters<Service[M]>[0],
  ): Promise<Awaited<ReturnType<Service[M]>>> {
    const method = name.charAt(0).toUpperCase() + name.slice(1);
    const policy = this.policies.get(method);
    const timeoutMs = this.timeoutMs ?? policy?.timeoutMs;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const call = this.service[name] as (r: typeof request, o: CallOptions) => ReturnType<Service[M]>;
    for (let attempt = 1; ; attempt += 1) {
      const remaining = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
      try {
        return (await call.call(this.service, request, { headers: this.headers, timeoutMs: remaining })) as Awaited<
          ReturnType<Service[M]>
        >;
      } catch (raw) {
        const error = toWmError(raw);
        const retry = policy?.retry;
        if (retry === undefined || attempt >= retry.maxAttempts || !retry.codes.has(error.code)) throw error;
        const pause = backoffMs(retry, attempt);
        if (deadline !== undefined && Date.now() + pause >= deadline) throw error;
        await sleep(pause);
      }
    }
  }

  private commitStream(
    sessionId: string,
    heartbeats: boolean | undefined,
    first: (signal: AbortSignal) => AsyncIterable<CommitEvent>,
  ): CommitStream {
    return new CommitStream(
      (commitId, after, signal) =>
        // Before the first event: the same request again (same request_id, same commit).
        commitId === undefined ? first(signal) : this.watchCall(sessionId, commitId, after, signal),
      { sessionId, heartbeats: heartbeats ?? false, policy: this.resumePolicy, finished: this.finishedProbe(sessionId) },
    );
  }

  private watchCall(sessionId: string, commitId: string, afterSequence: bigint, signal: AbortSignal) {
    return this.service.watchCommit({ sessionId, commitId, afterSequence }, this.callOptions("WatchCommit", signal));
  }

  /** For a stream that ended without its terminal event: has the commit ended with nothing
   * stored after `last`? (Then there is nothing to wait for.) */
  private finishedProbe(sessionId: string) {
    return async (commitId: string, last: bigint): Promise<boolean> => {
      const commit = await this.getCommit(sessionId, commitId);
      return TERMINAL_STATES.has(commit.state) && commit.lastSequence <= last;
    };
  }
}

