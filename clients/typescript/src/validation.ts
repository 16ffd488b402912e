/**
 * The contract's field rules, checked by the client before a request is sent (opt-in:
 * WmClientOptions.validateRequests).
 *
 * Why: every limit and field rule of wm.v1 is a protovalidate (buf.validate) annotation in the
 * proto, so Buf's runtime (@bufbuild/protovalidate) can evaluate the very rules the server
 * enforces at its edge, from the descriptors generated into src/gen: a runtime learns of a bad
 * request before it leaves the process (e.g. before the engine queues it during an outage).
 * A broken rule comes out as the error the server would have answered: an INVALID_ARGUMENT
 * WmError whose ErrorInfo reason is INVALID_REQUEST and whose BadRequest lists each violation
 * with its field path as the server writes it (`messages[0].parts`), protovalidate's
 * description, and the rule's id as reason (`repeated.min_items`, `string.pattern`,
 * `query.not_blank`). It is marked `clientSide` (nothing was sent, there is no call id).
 *
 * Off by default: the server checks every request anyway, and a client built from an older
 * contract would refuse what a newer server accepts (v1 only grows, but a limit may be raised).
 */
import { createRegistry, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Path } from "@bufbuild/protobuf/reflect";
import { createValidator, type Validator, type Violation } from "@bufbuild/protovalidate";
import { Code, ConnectError } from "@connectrpc/connect";

import { ERROR_DOMAIN, WmError, type FieldViolation } from "./errors.js";
import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { file_wm_v1_rules } from "./gen/wm/v1/rules_pb.js";

/** The ErrorInfo reason of a request that breaks a rule of the contract (as the server's). */
export const INVALID_REQUEST = "INVALID_REQUEST";
/** At most this many violations are reported, as the server reports them. */
export const MAX_VIOLATIONS = 100;

let shared: Validator | undefined;

/**
 * One validator for the process: it compiles each message's rules once and keeps them. The
 * registry holds the contract's predefined rules (wm/v1/rules.proto): without it their
 * extensions would be unknown fields, and the rules silently not applied.
 */
function validator(): Validator {
  shared ??= createValidator({ registry: createRegistry(file_wm_v1_rules) });
  return shared;
}

/** A field path as the server writes it: `messages[3].parts[0].tool_use.id`, `fields[k]`. */
export function fieldPath(path: Path): string {
  let out = "";
  for (const element of path) {
    switch (element.kind) {
      case "field":
      case "oneof":
        out += out ? `.${element.name}` : element.name;
        break;
      case "list_sub":
        out += `[${element.index}]`;
        break;
      case "map_sub":
        out += `[${String(element.key)}]`;
        break;
      case "extension":
        out += `[${element.typeName}]`;
        break;
    }
  }
  return out || "request";
}

function asFieldViolation(violation: Violation): FieldViolation {
  return {
    field: fieldPath(violation.field),
    description: violation.message || violation.ruleId,
    reason: violation.ruleId,
  };
}

/**
 * The rules `message` breaks, as field violations (empty when it keeps them all). A rule the
 * runtime cannot evaluate is left to the server (it is never a reason to refuse here).
 */
export function requestViolations<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): FieldViolation[] {
  const result = validator().validate(schema, message);
  if (result.kind !== "invalid") return [];
  return result.violations.slice(0, MAX_VIOLATIONS).map(asFieldViolation);
}

/** The error for a request that breaks rules: what the server answers to it, marked client-side. */
export function invalidRequestError(violations: readonly FieldViolation[]): WmError {
  const message = violations.map((v) => `${v.field}: ${v.description}`).join("; ");
  const cause = new ConnectError(message, Code.InvalidArgument, undefined, [
    { desc: ErrorInfoSchema, value: { reason: INVALID_REQUEST, domain: ERROR_DOMAIN } },
    { desc: BadRequestSchema, value: { fieldViolations: violations.map((v) => ({ ...v })) } },
  ]);
  return new WmError(Code.InvalidArgument, message, { cause, clientSide: true });
}

/** Throws the INVALID_ARGUMENT WmError the server would answer when `message` breaks a rule. */
export function checkRequest<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): void {
  const violations = requestViolations(schema, message);
  if (violations.length) throw invalidRequestError(violations);
}
