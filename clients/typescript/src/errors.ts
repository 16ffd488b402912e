/**
 * The client's one error class, carrying the decoded google.rpc.Status details.
 *
 * Why: a runtime must act on an error without parsing its text. The server sends every error
 * with an ErrorInfo (domain "wm", a machine-readable reason, one of wm.v1.ErrorReason, and
 * metadata) and, for INVALID_ARGUMENT, BadRequest field violations (the field's path, and as
 * reason the id of the protovalidate rule it breaks), in `grpc-status-details-bin`;
 * connect-node parses the Status and this module decodes its details with the generated schemas
 * of the vendored google/rpc/error_details.proto, once, at the edge. A request the client
 * refuses itself (validateRequests, see validation.ts) raises the same error, marked
 * `clientSide`.
 *
 * A broken connection is UNAVAILABLE here, as gRPC itself reports it (and as the Python
 * client sees it). connect-node calls a reset connection ABORTED (ECONNRESET), which this
 * service uses for version conflicts, and a connection that closed under a call CANCELLED
 * (the reset code of its HTTP/2 streams): a failure of either kind that carries no status from
 * the server and was not the caller's own abort is renamed before anyone decides on it.
 */
import { Code, ConnectError } from "@connectrpc/connect";

import { codeName } from "./config.js";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
  type BadRequest,
  type ErrorInfo,
} from "./gen/google/rpc/error_details_pb.js";

/** ErrorInfo.domain of the service's errors (without a version: the reasons never change meaning). */
export const ERROR_DOMAIN = "wm";
/** The server's id of the call, in its trailing metadata (its log lines carry it). */
export const REQUEST_ID_KEY = "x-request-id";

/** One bad field of a request, with its path (e.g. `messages[3].parts[0].text`). */
export interface FieldViolation {
  field: string;
  description: string;
  reason: string;
}

/** Node.js error codes of a connection that broke (or never opened) under a call. */
const CONNECTION_ERRORS = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ERR_STREAM_DESTROYED",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_ERROR",
]);

/** The Node.js error codes (and "AbortError" for an abort) along an error's cause chain. */
function nodeCodes(error: unknown): string[] {
  const codes: string[] = [];
  for (let current = error, depth = 0; current instanceof Error && depth < 8; depth += 1) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string") codes.push(code);
    if (current.name === "AbortError" || current.name === "TimeoutError") codes.push(current.name);
    current = current.cause;
  }
  return codes;
}

const CLOSED_UNDER_CALL = new Set([Code.Canceled, Code.Aborted]);

/** A failed call: the code, the server's message and the decoded details. */
export class WmError extends Error {
  override readonly name = "WmError";
  /** connect's code (numerically gRPC's). */
  readonly code: Code;
  /** The canonical gRPC name of the code, e.g. "NOT_FOUND". */
  readonly codeName: string;
  /** The server's message without the code prefix. */
  readonly rawMessage: string;
  /** ErrorInfo.reason, e.g. "SESSION_NOT_FOUND" ("" when the server sent none). */
  readonly reason: string;
  /** ErrorInfo.domain: "wm" when the service (or the client, checking the contract's rules) answered. */
  readonly domain: string;
  /** ErrorInfo.metadata. */
  readonly metadata: Readonly<Record<string, string>>;
  /** BadRequest field violations (INVALID_ARGUMENT). */
  readonly fieldViolations: readonly FieldViolation[];
  /** The server's id of the call (quote it in a bug report); "" when it never got there. */
  readonly requestId: string;
  /** RetryInfo's delay in milliseconds (RESOURCE_EXHAUSTED), when the server sent one. */
  readonly retryDelayMs: number | undefined;
  /** The decoded ErrorInfo and BadRequest, as the generated types. */
  readonly errorInfo: ErrorInfo | undefined;
  readonly badRequest: BadRequest | undefined;
  /** True when the client refused the request itself, by the contract's rules: nothing was sent. */
  readonly clientSide: boolean;

  constructor(code: Code, message: string, options: { cause?: ConnectError; clientSide?: boolean } = {}) {
    const connect = options.cause;
    const infos = connect ? connect.findDetails(ErrorInfoSchema) : [];
    const info = infos[0];
    super(`${codeName(code)}: ${message}${info?.reason ? ` [${info.reason}]` : ""}`, { cause: connect });
    this.code = code;
    this.clientSide = options.clientSide ?? false;
    this.codeName = codeName(code);
    this.rawMessage = message;
    this.errorInfo = info;
    this.reason = info?.reason ?? "";
    this.domain = info?.domain ?? "";
    this.metadata = { ...(info?.metadata ?? {}) };
    const bad = connect ? connect.findDetails(BadRequestSchema) : [];
    this.badRequest = bad[0];
    this.fieldViolations = bad.flatMap((detail) =>
      detail.fieldViolations.map((v) => ({ field: v.field, description: v.description, reason: v.reason })),
    );
    this.requestId = connect?.metadata.get(REQUEST_ID_KEY) ?? "";
    const retry = connect ? connect.findDetails(RetryInfoSchema)[0] : undefined;
    this.retryDelayMs = retry?.retryDelay
      ? Number(retry.retryDelay.seconds) * 1000 + retry.retryDelay.nanos / 1e6
      : undefined;
  }

  /** True when the service itself answered (its ErrorInfo is there), not the transport. */
  get fromService(): boolean {
    return this.domain === ERROR_DOMAIN && !this.clientSide;
  }
}

/** Any failure of a call as a WmError (a WmError is returned as it is). */
export function toWmError(error: unknown): WmError {
  if (error instanceof WmError) return error;
  const connect = ConnectError.from(error);
  let code = connect.code;
  const fromServer = connect.metadata.has("grpc-status") || connect.details.length > 0;
  if (!fromServer) {
    const causes = nodeCodes(connect);
    const ownAbort = causes.includes("AbortError") || causes.includes("TimeoutError");
    if (causes.some((c) => CONNECTION_ERRORS.has(c)) || (CLOSED_UNDER_CALL.has(code) && !ownAbort)) {
      code = Code.Unavailable;
    }
  }
  return new WmError(code, connect.rawMessage, { cause: connect });
}
