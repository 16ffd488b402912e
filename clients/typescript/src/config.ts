/**
 * The shared gRPC service config (clients/python/wm_client/data/wm_grpc_service_config.json: the one copy), read at run time.
 *
 * Why read the file rather than restate it: retries of UNAVAILABLE and per-method timeouts are
 * declared once for every client (Python, TypeScript, a mesh). connect-node has no service
 * config support, so this module turns the file into a policy per method and the client
 * applies it (see client.ts). The build copies the file into dist/; WM_SERVICE_CONFIG or the
 * client's `serviceConfig` option can point elsewhere.
 */
import { readFileSync } from "node:fs";

import { Code } from "@connectrpc/connect";

export const SERVICE_NAME = "wm.v1.WorkingMemoryService";
const BUNDLED = new URL("../wm_grpc_service_config.json", import.meta.url);

/** The subset of gRPC's service config schema this client reads. */
export interface ServiceConfig {
  methodConfig: Array<{
    name: Array<{ service?: string; method?: string }>;
    timeout?: string;
    retryPolicy?: {
      maxAttempts: number;
      initialBackoff: string;
      maxBackoff: string;
      backoffMultiplier: number;
      retryableStatusCodes: string[];
    };
  }>;
}

/** What the client does for one method: its deadline and, for unary methods, its retries. */
export interface MethodPolicy {
  timeoutMs: number | undefined;
  retry:
    | {
        maxAttempts: number;
        initialBackoffMs: number;
        maxBackoffMs: number;
        multiplier: number;
        codes: ReadonlySet<Code>;
      }
    | undefined;
}

/** Loads the service config: `path`, else WM_SERVICE_CONFIG, else the copy in the package. */
export function loadServiceConfig(path?: string | URL): ServiceConfig {
  const source = path ?? process.env.WM_SERVICE_CONFIG ?? BUNDLED;
  return JSON.parse(readFileSync(source, "utf8")) as ServiceConfig;
}

/** gRPC's duration strings ("0.1s", "30s") in milliseconds. */
export function durationMs(text: string): number {
  const match = /^(\d+(?:\.\d+)?)s$/.exec(text.trim());
  if (!match?.[1]) throw new Error(`not a service-config duration: ${JSON.stringify(text)}`);
  return Number(match[1]) * 1000;
}

/** The canonical gRPC code names ("UNAVAILABLE") as connect's codes. */
export function codeFromName(name: string): Code {
  const camel = name
    .toLowerCase()
    .split("_")
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join("");
  const code = (Code as unknown as Record<string, Code | undefined>)[camel === "Cancelled" ? "Canceled" : camel];
  if (code === undefined) throw new Error(`not a gRPC status code: ${name}`);
  return code;
}

/** The canonical gRPC name of a code ("NOT_FOUND"), as the other clients and the docs spell it. */
export function codeName(code: Code): string {
  const name = Code[code] ?? "Unknown";
  if (name === "Canceled") return "CANCELLED";
  return name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/** One policy per method name of the service, as the config's entries declare them. */
export function methodPolicies(config: ServiceConfig): Map<string, MethodPolicy> {
  const policies = new Map<string, MethodPolicy>();
  for (const entry of config.methodConfig) {
    const retry = entry.retryPolicy;
    const policy: MethodPolicy = {
      timeoutMs: entry.timeout === undefined ? undefined : durationMs(entry.timeout),
      retry: retry && {
        maxAttempts: retry.maxAttempts,
        initialBackoffMs: durationMs(retry.initialBackoff),
        maxBackoffMs: durationMs(retry.maxBackoff),
        multiplier: retry.backoffMultiplier,
        codes: new Set(retry.retryableStatusCodes.map(codeFromName)),
      },
    };
    for (const name of entry.name) {
      if (name.service === SERVICE_NAME && name.method) policies.set(name.method, policy);
    }
  }
  return policies;
}

/**
 * The pause before retry `attempt` (1 for the first retry), as gRPC's retry design defines it:
 * uniformly random between 0 and min(initial × multiplier^(attempt-1), max).
 */
export function backoffMs(policy: NonNullable<MethodPolicy["retry"]>, attempt: number): number {
  const ceiling = Math.min(
    policy.initialBackoffMs * policy.multiplier ** (attempt - 1),
    policy.maxBackoffMs,
  );
  return Math.random() * ceiling;
}
