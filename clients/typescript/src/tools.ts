/**
 * Running the tools a model calls: archive_search, archive_expand, tool_output_read, and the
 * long-term memory tools memory_search, memory_store and memory_forget (opt-in via `tools`).
 *
 * A runtime registers the definitions GetToolDefinitions serves (`definitions()` fetches those
 * this executor runs, in Anthropic shape); when the model calls one, the runtime hands the
 * call to `run`, which makes the RPC and returns the tool_result text, bounded in size so that
 * a recall never floods the context it is meant to save. Bad input and the service's refusals
 * (an unknown archive, a bad id) come back as an error result the model can read and correct;
 * only transport trouble throws. The same behaviour as the Python client's tools.py.
 *
 * The model speaks in short ids (archive_id "archive_002", output_id "out.m12.0", memory_id
 * "mem_…", as the tool definitions and the results name them); the executor turns them into
 * the contract's resource names for the calls (names.ts) and names back into short ids in
 * what the model reads. An archive or a tool output is always one of the executor's own
 * session: a name of another session given by the model counts as its short id.
 */

import type { WmClient } from "./client.js";
import { WmError } from "./errors.js";
import { archiveName, memoryName, sessionName, shortId } from "./names.js";
import { DEFAULT_MAX_CHARS, READ_LINES, TOOL_TRANSIENT } from "./rules.js";
import { MemoryType, Role, type Message } from "./gen/wm/v1/resources_pb.js";
import {
  SearchMode,
  SemanticRecall,
  ToolFormat,
  type SearchHit,
} from "./gen/wm/v1/working_memory_service_pb.js";

export const ARCHIVE_SEARCH = "archive_search";
export const ARCHIVE_EXPAND = "archive_expand";
export const TOOL_OUTPUT_READ = "tool_output_read";
export const RECALL_TOOLS = [ARCHIVE_SEARCH, ARCHIVE_EXPAND, TOOL_OUTPUT_READ] as const;
export const MEMORY_SEARCH = "memory_search";
export const MEMORY_STORE = "memory_store";
export const MEMORY_FORGET = "memory_forget";
export const MEMORY_TOOLS = [MEMORY_SEARCH, MEMORY_STORE, MEMORY_FORGET] as const;
const KNOWN: readonly string[] = [...RECALL_TOOLS, ...MEMORY_TOOLS];
export type RecallTool = (typeof RECALL_TOOLS)[number] | (typeof MEMORY_TOOLS)[number];
/** The memory types by the lower-case names the tools take ("preference" → PREFERENCE). */
const MEMORY_TYPES = new Map<string, MemoryType>(
  Object.entries(MemoryType)
    .filter((entry): entry is [string, MemoryType] => typeof entry[1] === "number" && entry[1] !== MemoryType.UNSPECIFIED)
    .map(([name, value]) => [name.toLowerCase(), value]),
);
/** Below the server's 20,000-character inline threshold: a recalled text is never itself
 * externalized when the runtime stores the tool result. */
export { DEFAULT_MAX_CHARS, READ_LINES } from "./rules.js"; // READ_LINES: when the model gives no count

/** The service could not answer now: the runtime's retry or backoff decides, not the model. */
const TRANSIENT = TOOL_TRANSIENT;

/** True when the service could not answer now: the executor throws it (the runtime's retry or
 * backoff decides) instead of telling the model the tool failed. */
export function isTransientToolError(error: WmError): boolean {
  return TRANSIENT.has(error.code);
}
const ROLES: Partial<Record<Role, string>> = {
  [Role.USER]: "user",
  [Role.ASSISTANT]: "assistant",
  [Role.SYSTEM]: "system",
};

/** What to send back as the tool_result. */
/** What a hit of a hybrid answer matched, for the model that reads it: "words", "meaning" or
 * both (found by meaning alone, it may be only loosely related), or "weak" (the least of the
 * candidates, scored 0 by the fusion's scaling); empty for the other modes. As the Python
 * client's `hit_basis`. */
export function hitBasis(hit: SearchHit, hybrid: boolean): string {
  if (!hybrid) return "";
  const found: string[] = [];
  if (hit.lexicalScore) found.push("words");
  if (hit.denseScore) found.push("meaning");
  return found.join(" and ") || "weak";
}

export class ToolRun {
  constructor(
    readonly content: string,
    readonly isError = false,
  ) {}

  /** The Messages API tool_result block for the call `toolUseId`. */
  anthropicBlock(toolUseId: string) {
    return { type: "tool_result" as const, tool_use_id: toolUseId, content: this.content, is_error: this.isError };
  }
}

/** An Anthropic Messages API tool definition, as GetToolDefinitions renders it. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: { type: "object"; [key: string]: unknown };
}

function bounded(text: string, limit: number, more: string): string {
  if (text.length <= limit) return text;
  const note = `\n[… cut at ${limit.toLocaleString("en-US")} of ${text.length.toLocaleString("en-US")} characters; ${more}]`;
  return text.slice(0, Math.max(0, limit - note.length)) + note;
}

function messageText(message: Message): string {
  return message.parts
    .map((part) => {
      switch (part.kind.case) {
        case "text":
          return part.kind.value;
        case "toolUse":
          return `[tool call ${part.kind.value.name} ${part.kind.value.inputJson}]`;
        case "toolResult":
          return `[tool result${part.kind.value.isError ? " (error)" : ""}] ${part.kind.value.content}`;
        default:
          return "";
      }
    })
    .filter((chunk) => chunk !== "")
    .join("\n");
}

/** A model's archive or tool-output id, always of the executor's own session. */
const own = (ident: string): string => shortId(ident);

const isInt = (value: unknown): value is number => typeof value === "number" && Number.isInteger(value);

/** Runs the recall tools of one session through a WmClient (the caller owns it). */
export class ToolExecutor {
  readonly names: readonly RecallTool[];

  /** The session's name. */
  readonly session: string;

  constructor(
    readonly client: WmClient,
    /** The session: its id or its name. */
    session: string,
    /** tools: the archive tools (RECALL_TOOLS) unless given; memoryTools adds MEMORY_TOOLS. */
    readonly options: { maxChars?: number; tools?: readonly string[]; memoryTools?: boolean } = {},
  ) {
    this.session = sessionName(session);
    const maxChars = options.maxChars ?? DEFAULT_MAX_CHARS;
    if (maxChars < 200) throw new RangeError("maxChars must be at least 200");
    const given: readonly string[] = options.tools ?? RECALL_TOOLS;
    const tools = options.memoryTools
      ? [...given, ...MEMORY_TOOLS.filter((t) => !given.includes(t))]
      : given;
    const unknown = tools.filter((t) => !KNOWN.includes(t));
    if (unknown.length) throw new RangeError(`not a recall tool: ${unknown.sort().join(", ")}`);
    this.names = tools as readonly RecallTool[];
  }

  private get maxChars(): number {
    return this.options.maxChars ?? DEFAULT_MAX_CHARS;
  }

  /** The definitions of this executor's tools, in Anthropic shape, from GetToolDefinitions. */
  async definitions(): Promise<AnthropicTool[]> {
    const reply = await this.client.getToolDefinitions(ToolFormat.ANTHROPIC_MESSAGES);
    return reply.tools
      .filter((tool) => (this.names as readonly string[]).includes(tool.name))
      .map((tool) => JSON.parse(tool.renderedJson) as AnthropicTool);
  }

  /** Runs the model's call of `name` with `input` (decoded, or its JSON text) and returns the
   * tool_result to send back. */
  async run(name: string, input: unknown): Promise<ToolRun> {
    if (!(this.names as readonly string[]).includes(name)) {
      return new ToolRun(`unknown tool '${name}'; available: ${this.names.join(", ")}`, true);
    }
    let args: unknown = input;
    if (typeof input === "string") {
      try {
        args = JSON.parse(input || "{}");
      } catch {
        return new ToolRun("the tool input is not valid JSON", true);
      }
    }
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      return new ToolRun("the tool input must be a JSON object", true);
    }
    const fields = args as Record<string, unknown>;
    try {
      if (name === ARCHIVE_SEARCH) return await this.search(fields);
      if (name === ARCHIVE_EXPAND) return await this.expand(fields);
      if ((MEMORY_TOOLS as readonly string[]).includes(name)) return await this.memory(name, fields);
      return await this.read(fields);
    } catch (error) {
      if (!(error instanceof WmError) || isTransientToolError(error)) throw error;
      return new ToolRun(`${name} failed: ${error.rawMessage}`, true);
    }
  }

  private async search(args: Record<string, unknown>): Promise<ToolRun> {
    const query = args.query;
    if (typeof query !== "string" || !query.trim()) {
      return new ToolRun("archive_search needs a non-empty string query", true);
    }
    const archiveId = args.archive_id ?? "";
    if (typeof archiveId !== "string") return new ToolRun("archive_id must be a string like archive_003", true);
    const reply = await this.client.searchArchives(query, {
      session: this.session,
      archive: archiveId ? archiveName(this.session, own(archiveId)) : "",
      mode: SearchMode.HYBRID,
    });
    if (!reply.hits.length) return new ToolRun(`nothing archived matches '${query}'`);
    const lines = [`${reply.totalMatches} matching message(s); best first:`];
    const hybrid = reply.semanticRecall !== SemanticRecall.UNSPECIFIED;
    for (const hit of reply.hits) {
      const basis = hitBasis(hit, hybrid);
      const role = `${ROLES[hit.role] ?? "tool"}${basis ? `; ${basis}` : ""}`;
      lines.push(`- ${shortId(hit.archive)}, message ${shortId(hit.message)} (${role}): ${hit.snippet}`);
    }
    return new ToolRun(bounded(lines.join("\n"), this.maxChars, "narrow the query or expand an archive for the full text"));
  }

  private async expand(args: Record<string, unknown>): Promise<ToolRun> {
    const archiveId = args.archive_id;
    if (typeof archiveId !== "string" || !archiveId) {
      return new ToolRun("archive_expand needs archive_id, e.g. archive_002", true);
    }
    const out: string[] = [];
    let size = 0;
    let total = 0;
    for await (const message of this.client.iterArchiveMessages(this.session, own(archiveId))) {
      total += 1;
      if (size >= this.maxChars) continue;
      const entry = `[${ROLES[message.role] ?? "tool"} ${message.id}]\n${messageText(message)}`;
      out.push(entry);
      size += entry.length + 2;
    }
    const more = `${total - out.length} later message(s) not shown; search for a keyword instead`;
    let text = `${shortId(archiveId)}: ${total} message(s)\n\n${out.join("\n\n")}`;
    if (out.length < total) text += `\n[… ${more}]`;
    return new ToolRun(bounded(text, this.maxChars, more));
  }

  /** memory_search, memory_store and memory_forget, for the session's owner. */
  private async memory(name: string, args: Record<string, unknown>): Promise<ToolRun> {
    const owner = this.session; // the session's owner
    if (name === MEMORY_FORGET) {
      const memoryId = args.memory_id;
      if (typeof memoryId !== "string" || !memoryId) return new ToolRun("memory_forget needs memory_id, e.g. mem_0123...", true);
      await this.client.deleteMemory(memoryName(memoryId));
      return new ToolRun(`forgot ${shortId(memoryId)}`);
    }
    if (name === MEMORY_STORE) {
      const type = MEMORY_TYPES.get(String(args.type ?? ""));
      const text = args.text;
      if (type === undefined || typeof text !== "string" || !text.trim()) {
        return new ToolRun(`memory_store needs text and a type (${[...MEMORY_TYPES.keys()].join(", ")})`, true);
      }
      const stored = await this.client.createMemory(owner, type, text);
      return new ToolRun(`${stored.deduplicated ? "already known as" : "stored as"} ${shortId(stored.memory?.name ?? "")}`);
    }
    const query = args.query;
    if (typeof query !== "string" || !query.trim()) return new ToolRun("memory_search needs a non-empty string query", true);
    const wanted = Array.isArray(args.types) ? args.types : [];
    const types = wanted.flatMap((t) => {
      const type = typeof t === "string" ? MEMORY_TYPES.get(t) : undefined;
      return type === undefined ? [] : [type];
    });
    const limit = isInt(args.limit) ? args.limit : 0;
    const reply = await this.client.searchMemories(query, { owner, types, pageSize: limit });
    if (!reply.hits.length) return new ToolRun(`no memory matches '${query}'`);
    const names = new Map([...MEMORY_TYPES].map(([key, value]) => [value, key]));
    const lines = reply.hits.map(
      (h) => `- ${shortId(h.memory?.name ?? "")} [${names.get(h.memory?.type ?? MemoryType.UNSPECIFIED) ?? "?"}] ${h.memory?.text ?? ""}`,
    );
    return new ToolRun(bounded(lines.join("\n"), this.maxChars, "narrow the query"));
  }

  private async read(args: Record<string, unknown>): Promise<ToolRun> {
    const outputId = args.output_id;
    if (typeof outputId !== "string" || !outputId) {
      return new ToolRun("tool_output_read needs output_id, as the synopsis names it", true);
    }
    const start = args.start_line ?? 1;
    const count = args.line_count ?? READ_LINES;
    if (!isInt(start) || !isInt(count) || start < 1 || count < 1) {
      return new ToolRun("start_line and line_count must be positive integers", true);
    }
    const page = await this.client.getToolOutput(this.session, own(outputId), {
      startLine: start,
      lineCount: count,
    });
    const lineCount = Number(page.toolOutput?.lineCount ?? 0n);
    const first = Number(page.startLine);
    const shown = Number(page.lineCount);
    const end = first + shown - 1;
    const label = shortId(outputId);
    const header = shown
      ? `${label}: lines ${first}-${end} of ${lineCount}`
      : `${label}: no lines from ${start} (it has ${lineCount})`;
    let text = `${header}\n${page.content}`;
    if (page.nextPageToken || end < Math.min(start + count - 1, lineCount)) {
      text += `\n[… continue with start_line=${end + 1}]`;
    }
    return new ToolRun(bounded(text, this.maxChars, "ask for fewer lines or a later start_line"));
  }
}
