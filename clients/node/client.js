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
const SERVICE_CONFIG_PATH = path.join(PROTO_DIR, 'wm', 'v1', 'wm_grpc_service_config.json');
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

  createSession(sessionId = '', { requestId } = {}) {
    return this._unary('CreateSession', { session_id: sessionId, request_id: requestId || crypto.randomUUID() });
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

  /** An async iterable of the commit's events (Phase 1 first), resumed after disconnects. */
  commit(sessionId, keepRecentCount = 0, { requestId } = {}) {
    const request = { session_id: sessionId, keep_recent_count: keepRecentCount, request_id: requestId || crypto.randomUUID() };
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

  assembleContext(sessionId, tokenBudget, { systemPrompt = '', includeAnthropicJson = false } = {}) {
    return this._unary('AssembleContext', {
      session_id: sessionId,
      token_budget: tokenBudget,
      system_prompt: systemPrompt,
      include_anthropic_json: includeAnthropicJson,
    });
  }

  listArchives(sessionId, { pageSize = 0, pageToken = '' } = {}) {
    return this._unary('ListArchives', { session_id: sessionId, page_size: pageSize, page_token: pageToken });
  }

  getArchive(sessionId, archiveId) {
    return this._unary('GetArchive', { session_id: sessionId, archive_id: archiveId });
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

module.exports = { WmClient, WmError, isResumable, loadContract, loadServiceConfig, SERVICE_CONFIG_PATH };
