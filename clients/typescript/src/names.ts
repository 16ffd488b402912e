/**
 * Resource names of wm.v1, built and taken apart in one place.
 *
 * Why: the contract addresses every resource by its name (`sessions/s1/commits/c_0001`), while
 * the people and models using the client know short ids (`s1`, `archive_001`, `out.m12.0`,
 * `mem_…`). An id never contains "/", so a value with the collection's prefix is a name and
 * anything else is an id: every public method of the client takes either and turns it into
 * the name here; displays (the tool results a model reads) turn names back into short ids with
 * `shortId`.
 *
 * The names' shapes are not written here: `PATTERNS` reads each resource's pattern
 * (`sessions/{session}/commits/{commit}`) from the `google.api.resource` annotation in the
 * generated descriptors, so the proto is their one source. The server and the Python client
 * read the same annotations; the shared cases in tests/conformance/names.json hold all three
 * to them.
 */
import { getOption, hasOption } from "@bufbuild/protobuf";

import { resource } from "./gen/google/api/resource_pb.js";
import { file_wm_v1_resources } from "./gen/wm/v1/resources_pb.js";

/** One resource's name pattern: its collections and the variable after each. */
export class Pattern {
  /** The collections in order (`["sessions", "commits"]`). */
  readonly collections: readonly string[];
  /** The variable after each collection (`["session", "commit"]`). */
  readonly variables: readonly string[];

  /** `text` as the proto writes it: `sessions/{session}/commits/{commit}`. */
  constructor(readonly text: string) {
    const parts = text.split("/");
    this.collections = parts.filter((_, i) => i % 2 === 0);
    this.variables = parts.filter((_, i) => i % 2 === 1).map((p) => p.slice(1, -1));
  }

  /** The name of the resource with these ids, one for each variable in order. */
  format(...ids: string[]): string {
    if (ids.length !== this.collections.length) {
      throw new RangeError(`${this.text} takes ${this.collections.length} ids, not ${ids.length}`);
    }
    return this.collections.map((c, i) => `${c}/${ids[i]}`).join("/");
  }

  /** The ids of `name` (one for each variable), or undefined when it is not of this pattern:
   * other collections, another length or an empty id. */
  parse(name: string): string[] | undefined {
    const parts = name.split("/");
    if (parts.length !== 2 * this.collections.length) return undefined;
    const ids = parts.filter((_, i) => i % 2 === 1);
    const fits = this.collections.every((c, i) => parts[2 * i] === c) && ids.every((id) => id);
    return fits ? ids : undefined;
  }
}

/** Each resource of wm.v1 by its type's short name (`Commit`), from the proto. */
export const PATTERNS: Readonly<Record<string, Pattern>> = Object.freeze(
  Object.fromEntries(
    file_wm_v1_resources.messages
      .filter((message) => hasOption(message, resource))
      .map((message) => {
        const found = getOption(message, resource);
        const text = found.pattern[0];
        if (text === undefined) throw new Error(`${found.type} has no pattern in the proto`);
        return [found.type.slice(found.type.lastIndexOf("/") + 1), new Pattern(text)];
      }),
  ),
);

function pattern(kind: string): Pattern {
  const found = PATTERNS[kind];
  if (found === undefined) throw new Error(`wm.v1 has no resource ${kind}`);
  return found;
}

const SESSION = pattern("Session");
const MESSAGE = pattern("Message");
const TOOL_OUTPUT = pattern("ToolOutput");
const COMMIT = pattern("Commit");
const WORKING_MEMORY = pattern("WorkingMemory");
const ARCHIVE = pattern("Archive");
const MEMORY = pattern("Memory");

export const SESSIONS = `${SESSION.collections[0]}/`;
export const MEMORIES = `${MEMORY.collections[0]}/`;
/** The owners of memories that are not sessions (rules.proto's memory_owner rule). */
export const USERS = "users/";
export const AGENTS = "agents/";
/** AIP-159's wildcard id: SearchArchives' parent for every session of the tenant. */
export const EVERY = "-";
export const ALL_SESSIONS = SESSION.format(EVERY);
export const LATEST = "latest";

/** The last segment of a name (`sessions/s1/archives/archive_001` → `archive_001`); an id stays
 * as it is. */
export function shortId(name: string): string {
  return name.slice(name.lastIndexOf("/") + 1);
}

/** `sessions/{session}` for a session id, or the name itself; a child's name (a commit, an
 * archive...) gives its session's name. */
export function sessionName(session: string): string {
  if (!session.startsWith(SESSIONS)) return SESSION.format(session);
  return session.split("/", 2).join("/");
}

/** The session's id, from its id, its name or any of its children's names. */
export function sessionId(session: string): string {
  return sessionName(session).slice(SESSIONS.length);
}

function child(session: string, kind: Pattern, id: string): string {
  return id.startsWith(SESSIONS) ? id : kind.format(sessionId(session), id);
}

/** `sessions/{s}/commits/{c}` from a session and a commit id, or the commit's name. */
export function commitName(session: string, commit: string): string {
  return child(session, COMMIT, commit);
}

/** `sessions/{s}/archives/{a}` from a session and `archive_001`, or the archive's name. */
export function archiveName(session: string, archive: string): string {
  return child(session, ARCHIVE, archive);
}

/** `sessions/{s}/messages/{m}` from a session and a message id, or the message's name. */
export function messageName(session: string, message: string): string {
  return child(session, MESSAGE, message);
}

/** `sessions/{s}/toolOutputs/{o}` from a session and `out.m12.0`, or the output's name. */
export function toolOutputName(session: string, toolOutput: string): string {
  return child(session, TOOL_OUTPUT, toolOutput);
}

/** `sessions/{s}/workingMemories/{version}`; version 0 (or "latest") names the newest. */
export function workingMemoryName(session: string, version: number | bigint | string = LATEST): string {
  const text = String(version);
  return WORKING_MEMORY.format(sessionId(session), text === "0" || text === "" ? LATEST : text);
}

/** `memories/{m}` from a memory id (`mem_…`), or the memory's name. */
export function memoryName(memory: string): string {
  return memory.startsWith(MEMORIES) ? memory : MEMORY.format(memory);
}

/**
 * Whose long-term memories: an owner's name (`users/ana`, `agents/bot`, `sessions/s1`), or
 * one of `{ userId }`, `{ agentId }`, `{ session }` (a session id or name: the memories of
 * that session's owner).
 */
export type MemoryOwner = string | { userId: string } | { agentId: string } | { session: string };

/** The name of a memory owner; a RangeError when it names none. */
export function ownerName(owner: MemoryOwner): string {
  if (typeof owner === "string") {
    if (owner.startsWith(USERS) || owner.startsWith(AGENTS) || owner.startsWith(SESSIONS)) return owner;
    throw new RangeError(`not a memory owner's name (users/…, agents/… or sessions/…): ${JSON.stringify(owner)}`);
  }
  if ("userId" in owner && owner.userId) return USERS + owner.userId;
  if ("agentId" in owner && owner.agentId) return AGENTS + owner.agentId;
  if ("session" in owner && owner.session) return sessionName(owner.session);
  throw new RangeError("a memory owner needs a user id, an agent id or a session");
}
