/**
 * Resource names of wm.v1, built and taken apart in one place.
 *
 * Why: the contract addresses every resource by its name (`sessions/s1/commits/c_0001`), while
 * the people and models using the client know short ids (`s1`, `archive_001`, `out.m12.0`,
 * `mem_…`). An id never contains "/", so a value with the collection's prefix is a name and
 * anything else is an id: every public method of the client takes either and turns it into
 * the name here; displays (the tool results a model reads) turn names back into short ids with
 * `shortId`. The Python client's names.py follows the same rules.
 */

export const SESSIONS = "sessions/";
export const MEMORIES = "memories/";
export const USERS = "users/";
export const AGENTS = "agents/";
/** SearchArchives' parent for every session of the tenant (AIP-159). */
export const ALL_SESSIONS = "sessions/-";
export const LATEST = "latest";

/** The last segment of a name (`sessions/s1/archives/archive_001` → `archive_001`); an id stays
 * as it is. */
export function shortId(name: string): string {
  return name.slice(name.lastIndexOf("/") + 1);
}

/** `sessions/{session}` for a session id, or the name itself; a child's name (a commit, an
 * archive...) gives its session's name. */
export function sessionName(session: string): string {
  if (!session.startsWith(SESSIONS)) return SESSIONS + session;
  return session.split("/", 2).join("/");
}

/** The session's id, from its id, its name or any of its children's names. */
export function sessionId(session: string): string {
  return sessionName(session).slice(SESSIONS.length);
}

function child(session: string, collection: string, id: string): string {
  return id.startsWith(SESSIONS) ? id : `${sessionName(session)}/${collection}/${id}`;
}

/** `sessions/{s}/commits/{c}` from a session and a commit id, or the commit's name. */
export function commitName(session: string, commit: string): string {
  return child(session, "commits", commit);
}

/** `sessions/{s}/archives/{a}` from a session and `archive_001`, or the archive's name. */
export function archiveName(session: string, archive: string): string {
  return child(session, "archives", archive);
}

/** `sessions/{s}/messages/{m}` from a session and a message id, or the message's name. */
export function messageName(session: string, message: string): string {
  return child(session, "messages", message);
}

/** `sessions/{s}/toolOutputs/{o}` from a session and `out.m12.0`, or the output's name. */
export function toolOutputName(session: string, toolOutput: string): string {
  return child(session, "toolOutputs", toolOutput);
}

/** `sessions/{s}/workingMemories/{version}`; version 0 (or "latest") names the newest. */
export function workingMemoryName(session: string, version: number | bigint | string = LATEST): string {
  const text = String(version);
  return `${sessionName(session)}/workingMemories/${text === "0" || text === "" ? LATEST : text}`;
}

/** `memories/{m}` from a memory id (`mem_…`), or the memory's name. */
export function memoryName(memory: string): string {
  return memory.startsWith(MEMORIES) ? memory : MEMORIES + memory;
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
