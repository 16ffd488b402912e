/**
 * A small coding-agent loop on the Anthropic SDK that keeps its context in the Working Memory
 * Service, the way a runtime should use it:
 *
 * - afterTurn after every exchange (the user's request, then each model step with its tool
 *   results), so the service holds the whole session and commits it when it grows;
 * - assemble before every model call: the model sees the service's context (the working
 *   memory summary, uncovered archives, the live messages) within the budget, and a system
 *   prompt addition that names the recall tools registered;
 * - the ToolExecutor when the model calls archive_search / archive_expand / tool_output_read;
 * - compact when the runtime wants its context small (here: between tasks and at the end).
 *
 * The runtime keeps its own copy of the conversation too: when the service is unreachable
 * the engine says so and the loop goes on with that copy.
 */
import { randomUUID } from "node:crypto";

import Anthropic from "@anthropic-ai/sdk";
import {
  ContextEngine,
  ContextFormat,
  Role,
  ToolExecutor,
  WmClient,
  type MessageInit,
  type PartInit,
  type ToolRun,
} from "@working-memory/client";

type Block = Anthropic.ContentBlockParam;

export interface AgentOptions {
  anthropic: Anthropic;
  engine: ContextEngine;
  tools: ToolExecutor;
  session: string;
  model?: string;
  /** The model's context window the service fills (reply reserve included). */
  tokenBudget?: number;
  maxSteps?: number;
  systemPrompt?: string;
}

export interface ToolCall {
  name: string;
  input: unknown;
  result: ToolRun;
}

export interface TaskReport {
  answer: string;
  steps: number;
  toolCalls: ToolCall[];
  /** Model calls made on the runtime's own messages because the service was unreachable. */
  fallbacks: number;
  /** Background commits afterTurn started during the task. */
  commitsStarted: number;
}

/** One Anthropic message as a wm.v1 message (the runtime's job: the service speaks wm.v1). */
export function toWm(message: Anthropic.MessageParam): MessageInit {
  const blocks: Block[] =
    typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
  const parts: PartInit[] = [];
  for (const block of blocks) {
    if (block.type === "text") parts.push({ kind: { case: "text", value: block.text } });
    else if (block.type === "tool_use") {
      parts.push({ kind: { case: "toolUse", value: { id: block.id, name: block.name, inputJson: JSON.stringify(block.input) } } });
    } else if (block.type === "tool_result") {
      const content =
        typeof block.content === "string"
          ? block.content
          : (block.content ?? []).map((b) => (b.type === "text" ? b.text : "")).join("\n");
      parts.push({ kind: { case: "toolResult", value: { toolUseId: block.tool_use_id, content, isError: block.is_error ?? false } } });
    }
  }
  return { id: randomUUID(), role: message.role === "user" ? Role.USER : Role.ASSISTANT, parts };
}

/** The model's reply as the parameter blocks the next request carries. */
function asParams(content: Anthropic.ContentBlock[]): Block[] {
  const blocks: Block[] = [];
  for (const block of content) {
    if (block.type === "text") blocks.push({ type: "text", text: block.text });
    else if (block.type === "tool_use") blocks.push({ type: "tool_use", id: block.id, name: block.name, input: block.input });
  }
  return blocks;
}

/** A runtime: one session, its own history, the loop. */
export class Agent {
  readonly history: Anthropic.MessageParam[] = [];
  private definitions: Anthropic.Tool[] | undefined;

  constructor(private readonly options: AgentOptions) {}

  private get budget(): number {
    return this.options.tokenBudget ?? 50_000;
  }

  /** Records an exchange: in the runtime's own history and, through afterTurn, in the service. */
  private async record(messages: Anthropic.MessageParam[], report: TaskReport): Promise<void> {
    this.history.push(...messages);
    const result = await this.options.engine.afterTurn(this.options.session, messages.map(toWm), this.budget, {
      keepRecentTurns: 1,
    });
    if (result.commit) report.commitsStarted += 1;
  }

  private async tools(): Promise<Anthropic.Tool[]> {
    if (this.definitions === undefined) {
      try {
        this.definitions = (await this.options.tools.definitions()).map((d) => ({
          name: d.name,
          description: d.description,
          input_schema: d.input_schema,
        }));
      } catch {
        return []; // the service is down: no recall tools this time, ask again next call
      }
    }
    return this.definitions;
  }

  /** Runs one task to the model's final answer. */
  async run(task: string): Promise<TaskReport> {
    const { anthropic, engine, tools, session } = this.options;
    const system = this.options.systemPrompt ?? "You are a careful coding agent.";
    const report: TaskReport = { answer: "", steps: 0, toolCalls: [], fallbacks: 0, commitsStarted: 0 };
    await this.record([{ role: "user", content: task }], report);
    while (report.steps < (this.options.maxSteps ?? 8)) {
      report.steps += 1;
      const context = await engine.assemble(session, this.budget, {
        systemPrompt: system,
        format: ContextFormat.ANTHROPIC_MESSAGES,
        registeredTools: tools.names,
        ownMessages: this.history,
      });
      let messages: Anthropic.MessageParam[];
      let addition = "";
      if (context.fallback) {
        report.fallbacks += 1;
        messages = [...context.messages];
      } else {
        messages = JSON.parse(context.response.renderedJson) as Anthropic.MessageParam[];
        addition = context.response.systemPromptAddition;
      }
      const reply = await anthropic.messages.create({
        model: this.options.model ?? "claude-sonnet-4-5",
        max_tokens: 2048,
        system: addition ? `${system}\n\n${addition}` : system,
        messages,
        tools: await this.tools(),
      });
      const assistant: Anthropic.MessageParam = { role: "assistant", content: asParams(reply.content) };
      const calls = reply.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
      if (!calls.length) {
        report.answer = reply.content.map((b) => (b.type === "text" ? b.text : "")).join("");
        await this.record([assistant], report);
        return report;
      }
      const results: Block[] = [];
      for (const call of calls) {
        const result = await tools.run(call.name, call.input);
        report.toolCalls.push({ name: call.name, input: call.input, result });
        results.push(result.anthropicBlock(call.id));
      }
      await this.record([assistant, { role: "user", content: results }], report);
    }
    report.answer = "(no final answer within the step limit)";
    return report;
  }
}

/** `node dist/src/agent.js "task" ...`: runs the tasks in one session, then compacts it. */
async function main(tasks: string[]): Promise<void> {
  const client = new WmClient({ apiKey: process.env.WM_API_KEY });
  const engine = new ContextEngine(client);
  const session = process.env.WM_SESSION ?? `agent-${randomUUID()}`;
  const agent = new Agent({ anthropic: new Anthropic(), engine, tools: new ToolExecutor(client, session), session });
  try {
    for (const task of tasks) console.log((await agent.run(task)).answer);
    const compacted = await engine.compact(session);
    console.log(`compacted ${session}: ${compacted.outcome}, ${compacted.tokensBefore} → ${compacted.tokensAfter} tokens`);
  } finally {
    await engine.close();
    client.close();
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  await main(process.argv.slice(2));
}
