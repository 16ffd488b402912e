/**
 * An OpenAI Agents JS `Session` kept by the Working Memory Service (`@openai/agents` is an
 * optional peer dependency: this entry, `@working-memory/client/openai-agents`, only imports its
 * types).
 *
 * A runner given this session stores every turn in the service and reads back the assembled
 * context (the working-memory summary of what was archived, the raw messages no summary covers
 * yet, the live messages) instead of an ever-growing list. `popItem` takes back the newest live
 * message (RemoveRecentMessages); archived messages are summarized and cannot be taken back, which
 * it says with the service's FAILED_PRECONDITION (reason MESSAGES_NOT_LIVE).
 *
 * One item is stored as one wm.v1 message: user, assistant and system messages as text parts
 * (an assistant message comes back with its text as one output_text, without its id), a
 * function_call as a tool_use part and a function_call_result as a tool_result part (its name
 * is found again from the call), so the service's summary and tool pairing see them; any other
 * item is kept as its JSON in a text part that starts with ITEM_MARKER and comes back as is.
 */
import type { AgentInputItem, Session } from "@openai/agents";

import { WmClient, newRequestId, type MessageInit, type SessionConfigInit } from "./client.js";
import { WmError } from "./errors.js";
import { sessionId, sessionName } from "./names.js";
import { Role, type Message } from "./gen/wm/v1/resources_pb.js";

export const ITEM_MARKER = "[openai-item] ";

type Json = Record<string, unknown>;

function contentText(content: unknown): string | undefined {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return undefined;
  const texts: string[] = [];
  for (const part of content as Json[]) {
    if (part?.type !== "input_text" && part?.type !== "output_text") return undefined;
    texts.push(String(part.text ?? ""));
  }
  return texts.join("");
}

const ROLES_IN: Record<string, Role> = { user: Role.USER, assistant: Role.ASSISTANT, system: Role.SYSTEM };

/** One item as one message (see the module's comment). */
export function itemToMessage(item: AgentInputItem, id: string): MessageInit {
  const data = item as unknown as Json;
  if (data.type === "function_call") {
    return {
      id,
      role: Role.ASSISTANT,
      parts: [{ kind: { case: "toolUse", value: { id: String(data.callId), name: String(data.name), inputJson: String(data.arguments || "{}") } } }],
    };
  }
  if (data.type === "function_call_result") {
    const output = data.output as unknown;
    const text =
      typeof output === "string" ? output : (output as Json)?.type === "text" ? String((output as Json).text) : JSON.stringify(output);
    return { id, role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolUseId: String(data.callId), content: text } } }] };
  }
  const role = ROLES_IN[String(data.role)];
  const text = data.type === undefined || data.type === "message" ? contentText(data.content) : undefined;
  if (role !== undefined && text !== undefined) return { id, role, parts: [{ kind: { case: "text", value: text } }] };
  return { id, role: role ?? Role.ASSISTANT, parts: [{ kind: { case: "text", value: ITEM_MARKER + JSON.stringify(data) } }] };
}

/** A stored (or assembled) message as items; `names` maps tool call ids to tool names. */
export function messageToItems(message: Message, names: Map<string, string> = new Map()): AgentInputItem[] {
  const items: Json[] = [];
  const texts: string[] = [];
  for (const part of message.parts) {
    const kind = part.kind;
    if (kind.case === "text" && kind.value.startsWith(ITEM_MARKER)) {
      items.push(JSON.parse(kind.value.slice(ITEM_MARKER.length)) as Json);
    } else if (kind.case === "text") {
      texts.push(kind.value);
    } else if (kind.case === "toolUse") {
      names.set(kind.value.id, kind.value.name);
      items.push({ type: "function_call", callId: kind.value.id, name: kind.value.name, arguments: kind.value.inputJson || "{}" });
    } else if (kind.case === "toolResult") {
      items.push({
        type: "function_call_result",
        callId: kind.value.toolUseId,
        name: names.get(kind.value.toolUseId) ?? "",
        status: "completed",
        output: { type: "text", text: kind.value.content },
      });
    }
  }
  if (texts.length) {
    const text = texts.join("\n\n");
    const first: Json =
      message.role === Role.ASSISTANT
        ? { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] }
        : { role: message.role === Role.SYSTEM ? "system" : "user", content: text };
    items.unshift(first);
  }
  return items as unknown as AgentInputItem[];
}

export interface WmAgentsSessionOptions {
  /** "assembled" (the default): the assembled context within tokenBudget; "live": the live messages as stored. */
  history?: "assembled" | "live";
  tokenBudget?: number;
  /** Given to CreateSession on the first write: the user (or agent) owns the long-term memories. */
  userId?: string;
  agentId?: string;
  config?: SessionConfigInit;
}

/** The history of one service session as an Agents JS session (see the module's comment). */
export class WmAgentsSession implements Session {
  /** The service session's id (the Agents SDK's session id). */
  readonly sessionId: string;
  /** Its resource name, "sessions/{id}". */
  readonly session: string;
  private created = false;

  constructor(
    /** The service session: its id or its name. */
    session: string,
    readonly client: WmClient,
    readonly options: WmAgentsSessionOptions = {},
  ) {
    this.session = sessionName(session);
    this.sessionId = sessionId(session);
  }

  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  private async messages(): Promise<Message[]> {
    if ((this.options.history ?? "assembled") === "assembled") {
      return (await this.client.assembleContext(this.session, this.options.tokenBudget ?? 64_000)).messages;
    }
    return this.messagesLive();
  }

  async getItems(limit?: number): Promise<AgentInputItem[]> {
    let messages: Message[];
    try {
      messages = await this.messages();
    } catch (error) {
      if (error instanceof WmError && error.codeName === "NOT_FOUND") return [];
      throw error;
    }
    const names = new Map<string, string>();
    const items = messages.flatMap((m) => messageToItems(m, names));
    if (limit === undefined) return items;
    return limit > 0 ? items.slice(-limit) : [];
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    if (!items.length) return;
    if (!this.created) {
      try {
        await this.client.createSession(this.sessionId, {
          userId: this.options.userId,
          agentId: this.options.agentId,
          config: this.options.config,
        });
      } catch (error) {
        if (!(error instanceof WmError && error.codeName === "ALREADY_EXISTS")) throw error;
      }
      this.created = true;
    }
    const rid = newRequestId();
    const messages = items.map((item, n) => itemToMessage(item, `${rid}.${n}`));
    for (let start = 0; start < messages.length; start += 1000) {
      await this.client.addMessages(this.session, messages.slice(start, start + 1000), {
        createSessionIfMissing: true,
        requestId: `${rid}.${start}`,
      });
    }
  }

  /**
   * The newest item, removed; undefined when the session has no message at all. Rejects with
   * a FAILED_PRECONDITION WmError (reason MESSAGES_NOT_LIVE) when every message left is archived.
   */
  async popItem(): Promise<AgentInputItem | undefined> {
    let removed: Message[];
    try {
      removed = (await this.client.removeRecentMessages(this.session, 1)).messages;
    } catch (error) {
      if (error instanceof WmError && error.codeName === "NOT_FOUND") return undefined;
      if (error instanceof WmError && error.reason === "MESSAGES_NOT_LIVE") {
        const session = await this.client.getSession(this.session);
        if (session.totalMessageCount === 0n) return undefined;
      }
      throw error;
    }
    const names = new Map<string, string>();
    const message = removed[0];
    if (message === undefined) return undefined;
    const results = message.parts.flatMap((p) => (p.kind.case === "toolResult" ? [p.kind.value.toolUseId] : []));
    if (results.length) {
      // The call's name, from the live messages that asked for it.
      for (const live of await this.messagesLive()) messageToItems(live, names);
    }
    const items = messageToItems(message, names);
    return items[items.length - 1];
  }

  private async messagesLive(): Promise<Message[]> {
    const out: Message[] = [];
    let pageToken = "";
    do {
      const page = await this.client.listMessages(this.session, { pageToken });
      out.push(...page.messages);
      pageToken = page.nextPageToken;
    } while (pageToken);
    return out;
  }

  /** Deletes the service session and everything of it; the next addItems creates it again. */
  async clearSession(): Promise<void> {
    try {
      await this.client.deleteSession(this.session);
    } catch (error) {
      if (!(error instanceof WmError && error.codeName === "NOT_FOUND")) throw error;
    }
    this.created = false;
  }
}
