'use strict';
// A small Node.js client of wm.v1.WorkingMemoryService, loading the contract from protos/ at
// run time (no generated code): the polyglot proof that the proto is the only source of truth.
//
// Like the Python client it sends a request_id with every mutating call (so the retries that
// the shared service config makes on UNAVAILABLE never store twice), turns errors into WmError
// with the decoded google.rpc.Status details, and resumes a broken commit stream with
// WatchCommit from the last sequence it delivered.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const REPO = path.resolve(__dirname, '..', '..');
const PROTO_DIR = path.join(REPO, 'protos');
const THIRD_PARTY_DIR = path.join(REPO, 'third_party');
// The one copy of the service config is the Python client's package data.
const SERVICE_CONFIG_PATH = path.join(REPO, 'clients', 'python', 'wm_client', 'data', 'wm_grpc_service_config.json');
const DEFAULT_ADDRESS = '127.0.0.1:50051';
const DETAILS_KEY = 'grpc-status-details-bin';
const REQUEST_ID_KEY = 'x-request-id'; // the server's id of the call, in its trailing metadata

// Only what is needed to read error details (google/rpc/error_details.proto is not vendored).
const rpcTypes = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Any: { fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } } },
          },
        },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: 'int32', id: 1 },
                message: { type: 'string', id: 2 },
                details: { rule: 'repeated', type: 'google.protobuf.Any', id: 3 },
              },
            },
            ErrorInfo: {
              fields: {
                reason: { type: 'string', id: 1 },
                domain: { type: 'string', id: 2 },
                metadata: { keyType: 'string', type: 'string', id: 3 },
              },
            },
            BadRequest: {
              fields: { field_violations: { rule: 'repeated', type: 'FieldViolation', id: 1 } },
              nested: {
                FieldViolation: {
                  fields: {
                    field: { type: 'string', id: 1 },
                    description: { type: 'string', id: 2 },
                    reason: { type: 'string', id: 3 },
                  },
                },
              },
            },
          },
        },
      },
    },
  },
});
const Status = rpcTypes.lookupType('google.rpc.Status');
const ErrorInfo = rpcTypes.lookupType('google.rpc.ErrorInfo');
const BadRequest = rpcTypes.lookupType('google.rpc.BadRequest');

/** The wm.v1 package, loaded from the .proto files. */
function loadContract() {
  const definition = protoLoader.loadSync('wm/v1/working_memory_service.proto', {
    includeDirs: [PROTO_DIR, THIRD_PARTY_DIR],
    keepCase: true, // field names exactly as in the proto: session_id, request_id, ...
    longs: Number, // counters and sequences fit in a double
    enums: String, // 'ROLE_USER', 'COMMIT_STAGE_COMPLETED', ...
    defaults: true,
    oneofs: true, // event.detail says which detail an event carries
  });
  return grpc.loadPackageDefinition(definition).wm.v1;
}

/** The service config shipped beside the protos (retries of UNAVAILABLE, timeouts). */
function loadServiceConfig() {
  return JSON.parse(fs.readFileSync(SERVICE_CONFIG_PATH, 'utf8'));
}

/**
 * A failed call: the gRPC code, the decoded details (ErrorInfo, BadRequest) and requestId, the
 * server's id of the call from its trailing metadata (its log lines carry it; empty when the
 * call never reached the service).
 */
class WmError extends Error {
  constructor(error) {
    super(error.details || error.message);
    this.name = 'WmError';
    this.code = error.code;
    const requestId = error.metadata ? error.metadata.get(REQUEST_ID_KEY) : [];
    this.requestId = requestId && requestId.length ? String(requestId[0]) : '';
    this.codeName = Object.keys(grpc.status).find((k) => grpc.status[k] === error.code) || 'UNKNOWN';
    this.reason = '';
    this.domain = '';
    this.metadata = {};
    this.fieldViolations = [];
    const raw = error.metadata ? error.metadata.get(DETAILS_KEY) : [];
    if (raw && raw.length) {
      const status = Status.decode(raw[0]);
      for (const detail of status.details) {
        const type = detail.type_url.split('/').pop();
        if (type === 'google.rpc.ErrorInfo') {
          const info = ErrorInfo.decode(detail.value);
          this.reason = info.reason;
          this.domain = info.domain;
          this.metadata = { ...info.metadata };
        } else if (type === 'google.rpc.BadRequest') {
          for (const v of BadRequest.decode(detail.value).field_violations) {
            this.fieldViolations.push({ field: v.field, description: v.description, reason: v.reason });
          }
        }
      }
    }
  }
}

const RESUMABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.CANCELLED, grpc.status.DEADLINE_EXCEEDED]);
const TRANSPORT = new Set([grpc.status.INTERNAL, grpc.status.UNKNOWN]);
const TERMINAL_STATES = new Set(['COMMIT_STATE_COMPLETED', 'COMMIT_STATE_FAILED', 'COMMIT_STATE_SKIPPED']);

/** True for a broken connection, false for an answer of the service. */
function isResumable(error) {
  return RESUMABLE.has(error.code) || (TRANSPORT.has(error.code) && error.domain !== 'wm.v1');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class WmClient {
  /**
   * @param {string} [address] host:port (default: WM_ADDRESS or 127.0.0.1:50051)
   * @param {object} [options] apiKey, credentials, giveUpAfterMs (stream resume budget)
   */
  constructor(address, options = {}) {
    const WorkingMemoryService = loadContract().WorkingMemoryService;
    this.address = address || process.env.WM_ADDRESS || DEFAULT_ADDRESS;
    this.stub = new WorkingMemoryService(
      this.address,
      options.credentials || grpc.credentials.createInsecure(),
      {
        'grpc.service_config': JSON.stringify(options.serviceConfig || loadServiceConfig()),
        'grpc.enable_retries': 1,
        'grpc.max_receive_message_length': 64 * 1024 * 1024,
        'grpc.initial_reconnect_backoff_ms': 200,
        'grpc.max_reconnect_backoff_ms': 3000,
      },
    );
    this.metadata = new grpc.Metadata();
    if (options.apiKey) this.metadata.set('authorization', `Bearer ${options.apiKey}`);
    this.giveUpAfterMs = options.giveUpAfterMs ?? 120000;
  }

  close() {
    this.stub.close();
  }

  /** Resolves when connected; rejects after timeoutMs. */
  waitForReady(timeoutMs) {
    return new Promise((resolve, reject) => {
      this.stub.waitForReady(Date.now() + timeoutMs, (error) => (error ? reject(error) : resolve()));
    });
  }

  _unary(method, request) {
    return new Promise((resolve, reject) => {
      this.stub[method](request, this.metadata, (error, response) => {
        if (error) reject(new WmError(error));
        else resolve(response);
      });
    });
  }

  /** config: a wm.v1.SessionConfig object (unset fields take the server's default). */
  createSession(sessionId = '', { requestId, config } = {}) {
    return this._unary('CreateSession', {
      session_id: sessionId,
      request_id: requestId || crypto.randomUUID(),
      config,
    });
  }

  /**
   * Change the session's config: the fields `paths` names (e.g.
   * 'config.auto_commit.idle_timeout'), or with no paths every field set in `config`.
   */
  updateSession(sessionId, config, paths = [], { requestId } = {}) {
    return this._unary('UpdateSession', {
      session: { session_id: sessionId, config },
      update_mask: { paths },
      request_id: requestId || crypto.randomUUID(),
    });
  }

  /** One page of the session's live messages, oldest first (follow next_page_token). */
  listMessages(sessionId, { pageSize = 0, pageToken = '' } = {}) {
    return this._unary('ListMessages', { session_id: sessionId, page_size: pageSize, page_token: pageToken });
  }

  getSession(sessionId) {
    return this._unary('GetSession', { session_id: sessionId });
  }

  listSessions({ pageSize = 0, pageToken = '' } = {}) {
    return this._unary('ListSessions', { page_size: pageSize, page_token: pageToken });
  }

  deleteSession(sessionId, { requestId } = {}) {
    return this._unary('DeleteSession', { session_id: sessionId, request_id: requestId || crypto.randomUUID() });
  }

  /** messages: wm.v1 Message objects, e.g. {id, role: 'ROLE_USER', parts: [{text: 'hi'}]}. */
  addMessages(sessionId, messages, { createSessionIfMissing = false, requestId } = {}) {
    return this._unary('AddMessages', {
      session_id: sessionId,
      messages,
      create_session_if_missing: createSessionIfMissing,
      request_id: requestId || crypto.randomUUID(),
    });
  }

  /**
   * An async iterable of the commit's events (Phase 1 first), resumed after disconnects.
   * keepRecentTurns keeps the newest turns instead of keepRecentCount messages.
   */
  commit(sessionId, keepRecentCount = 0, { requestId, keepRecentTurns = 0 } = {}) {
    const request = {
      session_id: sessionId,
      keep_recent_count: keepRecentCount,
      keep_recent_turns: keepRecentTurns,
      request_id: requestId || crypto.randomUUID(),
    };
    return this._events(sessionId, null, 0, () => this.stub.Commit(request, this.metadata));
  }

  compact(sessionId, { requestId } = {}) {
    const request = { session_id: sessionId, request_id: requestId || crypto.randomUUID() };
    return this._events(sessionId, null, 0, () => this.stub.Compact(request, this.metadata));
  }

  watchCommit(sessionId, commitId, { afterSequence = 0 } = {}) {
    return this._events(sessionId, commitId, afterSequence, null);
  }

  async *_events(sessionId, commitId, afterSequence, first) {
    let last = afterSequence;
    let brokenSince = null;
    let backoff = 100;
    for (;;) {
      const call = commitId
        ? this.stub.WatchCommit({ session_id: sessionId, commit_id: commitId, after_sequence: last }, this.metadata)
        : first(); // the same request_id again: the server answers with the same commit
      try {
        for await (const event of call) {
          brokenSince = null;
          backoff = 100;
          if (event.stage === 'COMMIT_STAGE_HEARTBEAT' || event.sequence <= last) continue;
          last = event.sequence;
          commitId = commitId || event.commit_id;
          yield event;
          if (event.terminal) return;
        }
        // Ended without the terminal event: resume, unless the commit ended before `last`.
        if (commitId) {
          const commit = await this.getCommit(sessionId, commitId);
          if (TERMINAL_STATES.has(commit.state) && commit.last_sequence <= last) return;
        }
      } catch (raw) {
        const error = raw instanceof WmError ? raw : new WmError(raw);
        if (!isResumable(error)) throw error;
      } finally {
        call.cancel();
      }
      brokenSince = brokenSince ?? Date.now();
      if (Date.now() - brokenSince > this.giveUpAfterMs) {
        throw new Error(`commit stream lost and not resumed within ${this.giveUpAfterMs} ms`);
      }
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 2000);
    }
  }

  getCommit(sessionId, commitId) {
    return this._unary('GetCommit', { session_id: sessionId, commit_id: commitId });
  }

  listCommits(sessionId, { pageSize = 0, pageToken = '' } = {}) {
    return this._unary('ListCommits', { session_id: sessionId, page_size: pageSize, page_token: pageToken });
  }

  retryCommit(sessionId, commitId, { requestId } = {}) {
    return this._unary('RetryCommit', { session_id: sessionId, commit_id: commitId, request_id: requestId || crypto.randomUUID() });
  }

  getWorkingMemory(sessionId, { version = 0 } = {}) {
    return this._unary('GetWorkingMemory', { session_id: sessionId, version });
  }

  applyWorkingMemoryOps(sessionId, ops, { expectedVersion = 0, requestId } = {}) {
    return this._unary('ApplyWorkingMemoryOps', {
      session_id: sessionId,
      ops,
      expected_version: expectedVersion,
      request_id: requestId || crypto.randomUUID(),
    });
  }

  /** registeredTools: the recall tools the runtime registered (e.g. executor.names). */
  assembleContext(sessionId, tokenBudget, { systemPrompt = '', includeAnthropicJson = false, registeredTools } = {}) {
    const request = {
      session_id: sessionId,
      token_budget: tokenBudget,
      system_prompt: systemPrompt,
      include_anthropic_json: includeAnthropicJson,
    };
    if (registeredTools) request.registered_tools = { names: registeredTools };
    return this._unary('AssembleContext', request);
  }

  listArchives(sessionId, { pageSize = 0, pageToken = '' } = {}) {
    return this._unary('ListArchives', { session_id: sessionId, page_size: pageSize, page_token: pageToken });
  }

  /** One page of an archive's messages; follow next_messages_page_token (or archiveMessages). */
  getArchive(sessionId, archiveId, { pageSize = 0, pageToken = '' } = {}) {
    return this._unary('GetArchive', { session_id: sessionId, archive_id: archiveId, page_size: pageSize, page_token: pageToken });
  }

  /** Every message of an archive, page after page. */
  async *archiveMessages(sessionId, archiveId, { pageSize = 0 } = {}) {
    let pageToken = '';
    do {
      const page = await this.getArchive(sessionId, archiveId, { pageSize, pageToken });
      yield* page.messages;
      pageToken = page.next_messages_page_token;
    } while (pageToken);
  }

  /** One page of a stored tool output: lines from startLine, or bytes when byteOffset is given. */
  getToolOutput(sessionId, outputId, { startLine = 0, lineCount = 0, byteOffset, byteLength = 0, pageToken = '' } = {}) {
    const request = { session_id: sessionId, output_id: outputId, page_token: pageToken };
    if (byteOffset !== undefined) request.bytes = { offset: byteOffset, length: byteLength };
    else request.lines = { start: startLine, count: lineCount };
    return this._unary('GetToolOutput', request);
  }

  searchToolOutputs(sessionId, query, { outputId = '', maxHits = 0 } = {}) {
    return this._unary('SearchToolOutputs', { session_id: sessionId, query, output_id: outputId, max_hits: maxHits });
  }

  searchArchives(query, { sessionId = '', archiveId = '', maxHits = 0, allSessions = false } = {}) {
    return this._unary('SearchArchives', {
      session_id: sessionId,
      query,
      archive_id: archiveId,
      max_hits: maxHits,
      all_sessions: allSessions,
    });
  }

  getToolDefinitions(format = 'TOOL_FORMAT_UNSPECIFIED') {
    return this._unary('GetToolDefinitions', { format });
  }
}

const RECALL_TOOLS = ['archive_search', 'archive_expand', 'tool_output_read'];
// Below the server's 20,000-character inline threshold: a recalled text is never itself
// externalized when the runtime stores the tool result.
const DEFAULT_MAX_CHARS = 16000;
const TRANSIENT = new Set(['UNAVAILABLE', 'DEADLINE_EXCEEDED', 'RESOURCE_EXHAUSTED']);
const ROLES = { ROLE_USER: 'user', ROLE_ASSISTANT: 'assistant', ROLE_SYSTEM: 'system' };

function bounded(text, limit, more) {
  if (text.length <= limit) return text;
  const note = `\n[… cut at ${limit.toLocaleString('en-US')} of ${text.length.toLocaleString('en-US')} characters; ${more}]`;
  return text.slice(0, Math.max(0, limit - note.length)) + note;
}

function messageText(message) {
  return message.parts.map((part) => {
    if (part.kind === 'text' || part.text) return part.text;
    if (part.tool_use) return `[tool call ${part.tool_use.name} ${part.tool_use.input_json}]`;
    if (part.tool_result) return `[tool result${part.tool_result.is_error ? ' (error)' : ''}] ${part.tool_result.content}`;
    return '';
  }).join('\n');
}

/**
 * Runs the recall tools a model calls (the names GetToolDefinitions serves) through the RPCs
 * and returns the tool_result {content, is_error}, bounded to maxChars. The service's
 * refusals come back as error results the model can read; transport trouble throws.
 */
class ToolExecutor {
  constructor(client, sessionId, { maxChars = DEFAULT_MAX_CHARS, tools = RECALL_TOOLS } = {}) {
    if (maxChars < 200) throw new Error('maxChars must be at least 200');
    const unknown = tools.filter((t) => !RECALL_TOOLS.includes(t));
    if (unknown.length) throw new Error(`not a recall tool: ${unknown.join(', ')}`);
    this.client = client;
    this.sessionId = sessionId;
    this.maxChars = maxChars;
    this.names = [...tools];
  }

  async run(name, input) {
    if (!this.names.includes(name)) return { content: `unknown tool '${name}'; available: ${this.names.join(', ')}`, is_error: true };
    let args = input;
    if (typeof input === 'string') {
      try {
        args = JSON.parse(input || '{}');
      } catch {
        return { content: 'the tool input is not valid JSON', is_error: true };
      }
    }
    if (!args || typeof args !== 'object' || Array.isArray(args)) return { content: 'the tool input must be a JSON object', is_error: true };
    try {
      if (name === 'archive_search') return await this._search(args);
      if (name === 'archive_expand') return await this._expand(args);
      return await this._read(args);
    } catch (error) {
      if (!(error instanceof WmError) || TRANSIENT.has(error.codeName)) throw error;
      return { content: `${name} failed: ${error.message}`, is_error: true };
    }
  }

  async _search({ query, archive_id: archiveId = '' }) {
    if (typeof query !== 'string' || !query.trim()) return { content: 'archive_search needs a non-empty string query', is_error: true };
    const reply = await this.client.searchArchives(query, { sessionId: this.sessionId, archiveId });
    if (!reply.hits.length) return { content: `no archived message contains '${query}'`, is_error: false };
    const lines = [`${reply.total_matches} matching message(s); newest archive first:`];
    for (const hit of reply.hits) lines.push(`- ${hit.archive_id}, message ${hit.message_id} (${ROLES[hit.role] || 'tool'}): ${hit.snippet}`);
    return { content: bounded(lines.join('\n'), this.maxChars, 'narrow the query or expand an archive for the full text'), is_error: false };
  }

  async _expand({ archive_id: archiveId }) {
    if (typeof archiveId !== 'string' || !archiveId) return { content: 'archive_expand needs archive_id, e.g. archive_002', is_error: true };
    const out = [];
    let size = 0;
    let total = 0;
    for await (const message of this.client.archiveMessages(this.sessionId, archiveId)) {
      total += 1;
      if (size >= this.maxChars) continue;
      const entry = `[${ROLES[message.role] || 'tool'} ${message.id}]\n${messageText(message)}`;
      out.push(entry);
      size += entry.length + 2;
    }
    const more = `${total - out.length} later message(s) not shown; search for a keyword instead`;
    let text = `${archiveId}: ${total} message(s)\n\n${out.join('\n\n')}`;
    if (out.length < total) text += `\n[… ${more}]`;
    return { content: bounded(text, this.maxChars, more), is_error: false };
  }

  async _read({ output_id: outputId, start_line: start = 1, line_count: count = 400 }) {
    if (typeof outputId !== 'string' || !outputId) return { content: 'tool_output_read needs output_id, as the synopsis names it', is_error: true };
    if (!Number.isInteger(start) || !Number.isInteger(count) || start < 1 || count < 1) {
      return { content: 'start_line and line_count must be positive integers', is_error: true };
    }
    const page = await this.client.getToolOutput(this.sessionId, outputId, { startLine: start, lineCount: count });
    const end = page.start_line + page.line_count - 1;
    const header = page.line_count
      ? `${outputId}: lines ${page.start_line}-${end} of ${page.output.line_count}`
      : `${outputId}: no lines from ${start} (it has ${page.output.line_count})`;
    let text = `${header}\n${page.content}`;
    if (page.next_page_token || end < Math.min(start + count - 1, page.output.line_count)) text += `\n[… continue with start_line=${end + 1}]`;
    return { content: bounded(text, this.maxChars, 'ask for fewer lines or a later start_line'), is_error: false };
  }
}

module.exports = { WmClient, WmError, ToolExecutor, RECALL_TOOLS, isResumable, loadContract, loadServiceConfig, SERVICE_CONFIG_PATH };
