/**
 * The typed client of wm.v1.WorkingMemoryService over connect-node's gRPC transport (HTTP/2).
 *
 * Why a wrapper over the generated service: every mutating call gets a request_id, made once
 * per logical call and sent again on every retry (so a retry of UNAVAILABLE never stores
 * twice); unary calls are retried and timed as the shared service config says (connect-node
 * has no service config of its own); errors come out as WmError with decoded details; commit
 * streams resume by themselves; on request, the contract's field rules are checked before
 * anything is sent (validateRequests). Requests are built here from plain arguments: a session,
 * commit, archive, tool output or memory is given by its short id or its resource name
 * (names.ts); responses are the generated wm.v1 messages, with names (int64 fields are bigint).
 */
import { randomUUID } from "node:crypto";

import { create, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
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
  type Message,
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
  WatchCommitRequestSchema,
  WorkingMemoryService,
  type AddMessagesResponse,
  type ApplyWorkingMemoryOpsResponse,
  type AssembleContextResponse,
  type GetToolDefinitionsResponse,
  type CreateMemoryResponse,
  type GetToolOutputResponse,
  type ListMemoriesResponse,
  type PurgeUserDataResponse,
  type SearchMemoriesResponse,
  type ListArchivesResponse,
  type ListCommitsResponse,
  type ListMessagesResponse,
  type RemoveRecentMessagesResponse,
  type ListSessionsResponse,
  type SearchArchivesResponse,
  type SearchToolOutputsResponse,
} from "./gen/wm/v1/working_memory_service_pb.js";
import {
  ALL_SESSIONS,
  LATEST,
  SESSIONS,
  archiveName,
  commitName,
  memoryName,
  ownerName,
  sessionId,
  sessionName,
  toolOutputName,
  workingMemoryName,
  type MemoryOwner,
} from "./names.js";
import { CommitStream, type ResumePolicy } from "./stream.js";
import { checkRequest } from "./validation.js";

export const DEFAULT_PORT = 50051;
export const DEFAULT_ADDRESS = `127.0.0.1:${DEFAULT_PORT}`;
/** Large enough for an assembled context or an archive page with its raw messages. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

export type MessageInit = MessageInitShape<typeof MessageSchema>;
export type PartInit = MessageInitShape<typeof PartSchema>;
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
  /**
   * Check every request against the contract's field rules (protovalidate, the rules the
   * server enforces) before sending it; one that breaks a rule throws the INVALID_ARGUMENT
   * WmError the server would answer (BadRequest field paths, rule ids as reasons), marked
   * `clientSide`, and is not sent. Default false: the server checks anyway, and a client
   * built from an older contract would refuse what a newer server may accept.
   */
  validateRequests?: boolean;
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
  /** Whether requests are checked against the contract's rules before they are sent. */
  readonly validateRequests: boolean;
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
    this.validateRequests = options.validateRequests ?? false;
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
  /** Creates a session (the server makes an id when `session` is empty; an id or a name);
   * fields of `config` left unset take the server's default; `userId` (else `agentId`) owns
   * the long-term memories the session makes and recalls. */
  createSession(
    session = "",
    options: { config?: SessionConfigInit; userId?: string; agentId?: string; requestId?: string } = {},
  ): Promise<Session> {
    return this.unary("createSession", {
      session: { config: options.config, userId: options.userId ?? "", agentId: options.agentId ?? "" },
      sessionId: session ? sessionId(session) : "",
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Changes the session's config: the fields `paths` names (e.g. "config.auto_commit.idle_timeout"),
   * or with no paths every field set in `config`. */
  updateSession(
    session: string,
    config: SessionConfigInit,
    paths: string[] = [],
    options: { requestId?: string } = {},
  ): Promise<Session> {
    return this.unary("updateSession", {
      session: { name: sessionName(session), config },
      updateMask: { paths },
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** A session (an id or a name) and its counters (pendingTokens, liveTokens, workingMemoryVersion...). */
  getSession(session: string): Promise<Session> {
    return this.unary("getSession", { name: sessionName(session) });
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
  async deleteSession(session: string, options: { requestId?: string } = {}): Promise<void> {
    await this.unary("deleteSession", { name: sessionName(session), requestId: options.requestId ?? newRequestId() });
  }

  /** Adds 1-1000 messages atomically; ids already stored come back as duplicates. */
  addMessages(
    session: string,
    messages: readonly MessageInit[],
    options: { createSessionIfMissing?: boolean; requestId?: string } = {},
  ): Promise<AddMessagesResponse> {
    return this.unary("addMessages", {
      parent: sessionName(session),
      messages: [...messages],
      createSessionIfMissing: options.createSessionIfMissing ?? false,
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** One page of messages, oldest first (follow nextPageToken): a session's live messages
   * (`parent` its id or name), or those of an archive (`parent` the archive's name; see
   * listArchiveMessages for an archive by its id). */
  listMessages(parent: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListMessagesResponse> {
    const name = parent.startsWith(SESSIONS) ? parent : sessionName(parent);
    return this.unary("listMessages", { parent: name, pageSize: options.pageSize ?? 0, pageToken: options.pageToken ?? "" });
  }

  /**
   * Takes back the newest `count` (1-100) live messages and returns them, oldest first; a
   * FAILED_PRECONDITION error (reason MESSAGES_NOT_LIVE) when fewer are live (archived
   * messages stay). A retry with the same `requestId` returns the same messages.
   */
  removeRecentMessages(
    session: string,
    count = 1,
    options: { requestId?: string } = {},
  ): Promise<RemoveRecentMessagesResponse> {
    return this.unary("removeRecentMessages", {
      parent: sessionName(session),
      count,
      requestId: options.requestId ?? newRequestId(),
    });
  }

  // --- commits ----------------------------------------------------------------------------------
  /**
   * Starts a commit (CreateCommit) keeping the newest `keepRecentCount` messages (0: archive
   * everything); returns the Commit once Phase 1 is stored. Retried on UNAVAILABLE with the
   * same request id, which the server answers with the same commit. Watch it with watchCommit,
   * or use commit() for both.
   */
  createCommit(
    session: string,
    options: { keepRecentCount?: number; keepRecentTurns?: number; requestId?: string } = {},
  ): Promise<Commit> {
    return this.unary("createCommit", {
      parent: sessionName(session),
      keepRecentCount: options.keepRecentCount ?? 0,
      keepRecentTurns: options.keepRecentTurns ?? 0,
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Starts a commit that archives every live message (CompactSession); as createCommit. */
  compactSession(session: string, options: { requestId?: string } = {}): Promise<Commit> {
    return this.unary("compactSession", { name: sessionName(session), requestId: options.requestId ?? newRequestId() });
  }

  /**
   * A commit keeping the newest `keepRecentCount` messages (or, with `keepRecentTurns`, the
   * newest turns), as its events (Phase 1 first): CreateCommit, then WatchCommit, resuming
   * itself after a disconnect (see stream.ts). Nothing is sent until the stream is first read.
   */
  commit(
    session: string,
    keepRecentCount = 0,
    options: { keepRecentTurns?: number; requestId?: string; heartbeats?: boolean } = {},
  ): CommitStream {
    const requestId = options.requestId ?? newRequestId();
    const request = { keepRecentCount, keepRecentTurns: options.keepRecentTurns ?? 0, requestId };
    return this.startedStream(session, options.heartbeats, (signal) =>
      this.unary("createCommit", { parent: sessionName(session), ...request }, signal),
    );
  }

  /** Archives every live message (CompactSession) and follows the commit to Phase 2's end. */
  compact(session: string, options: { requestId?: string; heartbeats?: boolean } = {}): CommitStream {
    const requestId = options.requestId ?? newRequestId();
    return this.startedStream(session, options.heartbeats, (signal) =>
      this.unary("compactSession", { name: sessionName(session), requestId }, signal),
    );
  }

  /** Re-attaches to a commit (its id with the session, or its name): stored events after
   * `afterSequence`, then live ones. */
  watchCommit(
    session: string,
    commit: string,
    options: { afterSequence?: Int; heartbeats?: boolean } = {},
  ): CommitStream {
    return new CommitStream((name, after, signal) => this.watchCall(name, after, signal), {
      session: sessionName(commit.startsWith(SESSIONS) ? commit : session),
      commit: commitName(session, commit),
      afterSequence: BigInt(options.afterSequence ?? 0),
      heartbeats: options.heartbeats ?? false,
      policy: this.resumePolicy,
      finished: this.finishedProbe(),
    });
  }

  /** A commit's current state (its id with the session, or its name). */
  getCommit(session: string, commit: string): Promise<Commit> {
    return this.unary("getCommit", { name: commitName(session, commit) });
  }

  /** One page of a session's commits, newest first. */
  listCommits(session: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListCommitsResponse> {
    return this.unary("listCommits", {
      parent: sessionName(session),
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** Runs Phase 2 of a failed commit again (watch it with watchCommit). */
  retryCommit(session: string, commit: string, options: { requestId?: string } = {}): Promise<Commit> {
    return this.unary("retryCommit", { name: commitName(session, commit), requestId: options.requestId ?? newRequestId() });
  }

  // --- working memory ---------------------------------------------------------------------------
  /** The latest completed working memory, or `version`; NOT_FOUND when there is none. */
  getWorkingMemory(session: string, options: { version?: Int } = {}): Promise<WorkingMemory> {
    return this.unary("getWorkingMemory", { name: workingMemoryName(session, options.version ?? LATEST) });
  }

  /** Applies ops computed by the caller's own model, through the server's guards. */
  applyWorkingMemoryOps(
    session: string,
    ops: readonly SectionOpInit[],
    options: { expectedVersion?: Int; requestId?: string } = {},
  ): Promise<ApplyWorkingMemoryOpsResponse> {
    return this.unary("applyWorkingMemoryOps", {
      parent: sessionName(session),
      ops: [...ops],
      expectedVersion: BigInt(options.expectedVersion ?? 0),
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** The next model context within `tokenBudget` tokens; with `registeredTools` (e.g.
   * ToolExecutor.names) its system-prompt addition names only those tools; with
   * `recallMemories`, it ends with the long-term memories relevant to the newest user request
   * (within `memoryTokenBudget`, 0: the server's default); with `format` (e.g.
   * ContextFormat.ANTHROPIC_MESSAGES) it is also rendered for that model API into
   * `renderedJson`. */
  assembleContext(
    session: string,
    tokenBudget: Int,
    options: {
      systemPrompt?: string;
      registeredTools?: readonly string[];
      recallMemories?: boolean;
      memoryTokenBudget?: Int;
      format?: ContextFormat;
    } = {},
  ): Promise<AssembleContextResponse> {
    return this.unary("assembleContext", {
      name: sessionName(session),
      format: options.format ?? ContextFormat.UNSPECIFIED,
      memoryRecall: options.recallMemories
        ? { enabled: true, tokenBudget: BigInt(options.memoryTokenBudget ?? 0) }
        : undefined,
      tokenBudget: BigInt(tokenBudget),
      systemPrompt: options.systemPrompt ?? "",
      // Set, even when empty: an empty list means no tools at all.
      registeredTools: options.registeredTools ? { names: [...options.registeredTools] } : undefined,
    });
  }

  // --- archives ---------------------------------------------------------------------------------
  /** One page of a session's archives, oldest first. */
  listArchives(session: string, options: { pageSize?: number; pageToken?: string } = {}): Promise<ListArchivesResponse> {
    return this.unary("listArchives", {
      parent: sessionName(session),
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** One archive (`archive_001` with the session, or its name); its messages: listArchiveMessages. */
  getArchive(session: string, archive: string): Promise<Archive> {
    return this.unary("getArchive", { name: archiveName(session, archive) });
  }

  /** One page of an archive's messages (ListMessages with the archive as parent). */
  listArchiveMessages(
    session: string,
    archive: string,
    options: { pageSize?: number; pageToken?: string } = {},
  ): Promise<ListMessagesResponse> {
    return this.listMessages(archiveName(session, archive), options);
  }

  /** Every message of an archive, page after page. */
  async *iterArchiveMessages(session: string, archive: string, pageSize = 0): AsyncGenerator<Message> {
    let pageToken = "";
    do {
      const page = await this.listArchiveMessages(session, archive, { pageSize, pageToken });
      yield* page.messages;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** Search over archived messages: literal and case-insensitive (newest archive first), or
   * `ranked` by BM25 (best first), or any `mode` of the contract (wins over `ranked`; HYBRID
   * fuses BM25 with recall by meaning, hits at or above `minScore`); in `session` (or one
   * `archive` of it), or, with `allSessions`, across the tenant's sessions or those of
   * `userId` / `agentId`. */
  searchArchives(
    query: string,
    options: {
      session?: string;
      archive?: string;
      pageSize?: number;
      allSessions?: boolean;
      ranked?: boolean;
      mode?: SearchMode;
      minScore?: number;
      userId?: string;
      agentId?: string;
    } = {},
  ): Promise<SearchArchivesResponse> {
    const session = options.session ?? "";
    const archive = options.archive ? archiveName(session, options.archive) : "";
    const parent = options.allSessions ? ALL_SESSIONS : session || archive ? sessionName(session || archive) : "";
    return this.unary("searchArchives", {
      parent,
      mode: options.mode ?? (options.ranked ? SearchMode.RANKED : SearchMode.UNSPECIFIED),
      minScore: options.minScore ?? 0,
      userId: options.userId ?? "",
      agentId: options.agentId ?? "",
      query,
      archive,
      pageSize: options.pageSize ?? 0,
    });
  }

  // --- long-term memories ----------------------------------------------------------------------
  /** An owner's active memories ranked against `query`, best first; with
   * `includeSuperseded`, the memories newer ones replaced too, ranked below them. */
  searchMemories(
    query: string,
    options: { owner: MemoryOwner; types?: MemoryType[]; pageSize?: number; includeSuperseded?: boolean },
  ): Promise<SearchMemoriesResponse> {
    return this.unary("searchMemories", {
      owner: ownerName(options.owner),
      query,
      types: options.types ?? [],
      pageSize: options.pageSize ?? 0,
      includeSuperseded: options.includeSuperseded ?? false,
    });
  }

  /** One page of an owner's memories, newest first. */
  listMemories(options: {
    owner: MemoryOwner;
    types?: MemoryType[];
    state?: MemoryState;
    pageSize?: number;
    pageToken?: string;
  }): Promise<ListMemoriesResponse> {
    return this.unary("listMemories", {
      owner: ownerName(options.owner),
      types: options.types ?? [],
      state: options.state ?? MemoryState.UNSPECIFIED,
      pageSize: options.pageSize ?? 0,
      pageToken: options.pageToken ?? "",
    });
  }

  /** One memory (`mem_…` or its name) with its history. */
  getMemory(memory: string): Promise<Memory> {
    return this.unary("getMemory", { name: memoryName(memory) });
  }

  /** Stores a memory (or finds the owner's active one that says the same). `supersedes`: the
   * owner's active memories it replaces (ids or names; they become SUPERSEDED, valid until
   * this one); `expireTime`: when to forget it. */
  createMemory(
    owner: MemoryOwner,
    type: MemoryType,
    text: string,
    options: { requestId?: string; supersedes?: readonly string[]; expireTime?: Date } = {},
  ): Promise<CreateMemoryResponse> {
    return this.unary("createMemory", {
      owner: ownerName(owner),
      memory: {
        type,
        text,
        supersedes: (options.supersedes ?? []).map(memoryName),
        ...(options.expireTime ? { expireTime: timestampFromDate(options.expireTime) } : {}),
      },
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Corrects a memory: writes the fields given (the superseded version stays in its history
   * with `reason`; empty: "user correction"). */
  updateMemory(
    memory: string,
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
      memory: { name: memoryName(memory), ...content, ...(expireTime ? { expireTime: timestampFromDate(expireTime) } : {}) },
      updateMask: { paths },
      reason: options.reason ?? "",
      requestId: options.requestId ?? newRequestId(),
    });
  }

  /** Forgets a memory: store, index and history. */
  async deleteMemory(memory: string, options: { requestId?: string } = {}): Promise<void> {
    await this.unary("deleteMemory", { name: memoryName(memory), requestId: options.requestId ?? newRequestId() });
  }

  /** Retires a memory that no longer holds: kept with `reason`, no longer recalled. */
  retireMemory(memory: string, reason: string, options: { requestId?: string } = {}): Promise<Memory> {
    return this.unary("retireMemory", { name: memoryName(memory), reason, requestId: options.requestId ?? newRequestId() });
  }

  /** Forgets a user: every memory they own and every session created with their userId
   * (messages, archives, tool outputs); the counts removed. */
  purgeUserData(userId: string, options: { requestId?: string } = {}): Promise<PurgeUserDataResponse> {
    return this.unary("purgeUserData", { userId, requestId: options.requestId ?? newRequestId() });
  }

  // --- tool outputs -----------------------------------------------------------------------------
  /** One page of a stored tool output (`out.m12.0` with the session, or its name): lines from
   * `startLine` (1-based), or bytes when `byteOffset` is given; `pageToken` continues a range. */
  getToolOutput(
    session: string,
    toolOutput: string,
    options: { startLine?: Int; lineCount?: Int; byteOffset?: Int; byteLength?: Int; pageToken?: string } = {},
  ): Promise<GetToolOutputResponse> {
    const range =
      options.byteOffset !== undefined
        ? { case: "bytes" as const, value: { offset: BigInt(options.byteOffset), length: BigInt(options.byteLength ?? 0) } }
        : {
            case: "lines" as const,
            value: { start: BigInt(options.startLine ?? 0), count: BigInt(options.lineCount ?? 0) },
          };
    return this.unary("getToolOutput", {
      name: toolOutputName(session, toolOutput),
      range,
      pageToken: options.pageToken ?? "",
    });
  }

  /** Literal, case-insensitive search over the session's stored tool outputs, by line. */
  searchToolOutputs(
    session: string,
    query: string,
    options: { toolOutput?: string; pageSize?: number } = {},
  ): Promise<SearchToolOutputsResponse> {
    return this.unary("searchToolOutputs", {
      parent: sessionName(session),
      query,
      toolOutput: options.toolOutput ? toolOutputName(session, options.toolOutput) : "",
      pageSize: options.pageSize ?? 0,
    });
  }

  /** The recall tools' definitions (and update_working_memory), ready to register: each
   * rendered for `format`'s API into `renderedJson`. */
  getToolDefinitions(format: ToolFormat = ToolFormat.UNSPECIFIED): Promise<GetToolDefinitionsResponse> {
    return this.unary("getToolDefinitions", { format });
  }

  // --- plumbing ---------------------------------------------------------------------------------
  private callOptions(method: string, signal?: AbortSignal): CallOptions {
    const timeoutMs = this.timeoutMs ?? this.policies.get(method)?.timeoutMs;
    return { headers: this.headers, timeoutMs, signal };
  }

  /** The request as its generated message, checked against the contract's rules when the
   * client validates requests (a WmError INVALID_ARGUMENT, marked clientSide, when it breaks one). */
  private checked<Desc extends DescMessage>(schema: Desc, request: MessageInitShape<Desc>): MessageShape<Desc> {
    const message = create(schema, request);
    if (this.validateRequests) checkRequest(schema, message);
    return message;
  }

  /**
   * One logical unary call: the request is built once (so its request_id is the same on every
   * attempt) and retried on the service config's codes with its backoff, within one deadline.
   */
  private async unary<M extends UnaryName>(
    name: M,
    request: Parameters<Service[M]>[0],
    signal?: AbortSignal,
  ): Promise<Awaited<ReturnType<Service[M]>>> {
    const method = name.charAt(0).toUpperCase() + name.slice(1);
    const message = this.checked(WorkingMemoryService.method[name].input as DescMessage, request as MessageInitShape<DescMessage>);
    const policy = this.policies.get(method);
    const timeoutMs = this.timeoutMs ?? policy?.timeoutMs;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const call = this.service[name] as unknown as (r: unknown, o: CallOptions) => ReturnType<Service[M]>;
    for (let attempt = 1; ; attempt += 1) {
      const remaining = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
      try {
        return (await call.call(this.service, message, { headers: this.headers, timeoutMs: remaining, signal })) as Awaited<
          ReturnType<Service[M]>
        >;
      } catch (raw) {
        const error = toWmError(raw);
        const retry = policy?.retry;
        if (retry === undefined || attempt >= retry.maxAttempts || !retry.codes.has(error.code)) throw error;
        const pause = backoffMs(retry, attempt);
        if (deadline !== undefined && Date.now() + pause >= deadline) throw error;
        if (signal?.aborted) throw error;
        await sleep(pause);
      }
    }
  }

  /** A stream whose commit `start` makes (CreateCommit or CompactSession, one request id for
   * every attempt), then watches. */
  private startedStream(
    session: string,
    heartbeats: boolean | undefined,
    start: (signal: AbortSignal) => Promise<Commit>,
  ): CommitStream {
    return new CommitStream((name, after, signal) => this.watchCall(name, after, signal), {
      session: sessionName(session),
      start,
      heartbeats: heartbeats ?? false,
      policy: this.resumePolicy,
      finished: this.finishedProbe(),
    });
  }

  private watchCall(name: string, afterSequence: bigint, signal: AbortSignal): AsyncIterable<CommitEvent> {
    const request = this.checked(WatchCommitRequestSchema, { name, afterSequence });
    return this.service.watchCommit(request, this.callOptions("WatchCommit", signal));
  }

  /** For a stream that ended without its terminal event: has the commit ended with nothing
   * stored after `last`? (Then there is nothing to wait for.) */
  private finishedProbe() {
    return async (name: string, last: bigint): Promise<boolean> => {
      const commit = await this.unary("getCommit", { name });
      return TERMINAL_STATES.has(commit.state) && commit.lastSequence <= last;
    };
  }
}
