"""``wm-mcp``: the Working Memory Service as an MCP server, over stdio or streamable HTTP.

Why an MCP server: an agent host that speaks MCP (a desktop assistant, an IDE, any agent
framework with an MCP client) gets recall, tool-output reading, long-term memories, the
working memory and context assembly without writing gRPC glue. It is a thin adapter over
:class:`~wm_client.client.WmClient`: every tool is one or two RPCs, and the rendering of the
recall results is the client's own (:class:`~wm_client.tools.ToolExecutor`), so a model reads
the same text whether its runtime calls the service directly or through MCP.

Credentials are the gRPC ones: ``--api-key`` (or ``WM_API_KEY``) is sent as ``authorization:
Bearer <key>``, and the key names the tenant. Over HTTP a request's own ``Authorization``
header wins, so one ``wm-mcp`` can serve several tenants. The service's refusals come back as
tool errors the model can read and correct; nothing is retried here beyond the channel's own
retries of UNAVAILABLE.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Annotated, Any

import grpc
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from wm_client import _rules, names
from wm_client.channel import default_address, open_channel, reachable_address
from wm_client.client import WmClient
from wm_client.errors import WmError
from wm_client.tools import (
    ARCHIVE_EXPAND,
    MEMORY_FORGET,
    MEMORY_SEARCH,
    MEMORY_STORE,
    TOOL_OUTPUT_READ,
    ToolExecutor,
    hit_line,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api

# How `recall` searches the archives: hybrid, the contract's best answer (words ranked by BM25
# fused with recall by meaning; a query of symbols only is matched literally by the server).
RECALL_MODE: api.SearchMode.ValueType = api.SEARCH_MODE_HYBRID
API_KEY_VARIABLE = "WM_API_KEY"
SESSION_VARIABLE = "WM_SESSION_ID"
DEFAULT_TOKEN_BUDGET = 32_000
MAX_CREDENTIALS = 64  # clients kept, one per Authorization seen (they are cheap to make again)
INSTRUCTIONS = (
    "Working memory of a long-running agent session. Older conversation is archived and "
    "summarized in a working memory; before saying something was never mentioned, use recall. "
    "Large tool outputs are stored whole: a message names them as out.MESSAGE.PART; read them "
    "with read_tool_output or search them with search_tool_outputs. Long-term memories about the "
    "user outlive sessions: search_memories before asking the user again, remember what will "
    "matter later, forget what the user asks you to forget."
)
_ROLES = {pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant", pb.ROLE_SYSTEM: "system"}
_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# The arguments, described for the model that fills them in.
Session = Annotated[
    str, Field(description="The session id; leave empty for the session this server is bound to.")
]
Query = Annotated[str, Field(description="Words to look for, e.g. a name, an error, a file path.")]
OutputId = Annotated[
    str, Field(description="A stored tool output's id as a message names it, e.g. out.m42.0.")
]
MemoryId = Annotated[str, Field(description="A memory's id as search_memories shows it (mem_...).")]
MemoryKind = Annotated[
    str,
    Field(description="One of: profile, preference, entity, event, decision, procedure."),
]


def _message_text(message: pb.Message) -> str:
    chunks: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            chunks.append(part.text)
        elif kind == "tool_use":
            chunks.append(f"[tool call {part.tool_use.id} {part.tool_use.name}]"
                          f" {part.tool_use.input_json or '{}'}")  # fmt: skip
        elif kind == "tool_result":
            error = " (error)" if part.tool_result.is_error else ""
            chunks.append(f"[tool result {part.tool_result.tool_use_id}{error}]"
                          f" {part.tool_result.content}")  # fmt: skip
    return "\n".join(chunks)


class WmMcp:
    """The MCP server of one service address: the tools and resources, and the clients they
    use (one channel; a client per credential seen)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        api_key: str | None = None,
        session_id: str = "",
        timeout: float | None = None,
    ) -> None:
        self.address = reachable_address(address) if address else default_address()
        self.api_key = api_key or None
        self.session_id = session_id
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._clients: dict[str | None, WmClient] = {}
        self.server: MCPServer[Any] = MCPServer(
            "working-memory", instructions=INSTRUCTIONS, version="0.1.0"
        )
        self._register()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._clients.clear()

    # --- plumbing ------------------------------------------------------------------------------
    def client(self, ctx: Context | None = None) -> WmClient:
        """The client for this request: its HTTP ``Authorization`` header when it has one,
        else the configured API key."""
        header = None
        if ctx is not None:
            try:
                headers = ctx.headers
            except ValueError:  # outside a request
                headers = None
            if headers:
                header = headers.get("authorization") or headers.get("Authorization")
        key = header or (f"Bearer {self.api_key}" if self.api_key else None)
        found = self._clients.get(key)
        if found is None:
            if self._channel is None:
                self._channel = open_channel(self.address)
            metadata = [("authorization", key)] if key else []
            found = WmClient(
                self.address, channel=self._channel, metadata=metadata, timeout=self.timeout
            )
            if len(self._clients) >= MAX_CREDENTIALS:  # the oldest first: they share a channel
                del self._clients[next(iter(self._clients))]
            self._clients[key] = found
        return found

    def session(self, given: str) -> str:
        session = given.strip() or self.session_id
        if not session:
            raise ToolError(
                "no session: pass session_id (or start wm-mcp with --session / WM_SESSION_ID)"
            )
        return session

    async def _run(self, ctx: Context, session_id: str, name: str, args: dict[str, Any]) -> str:
        """One of the client's recall tools, its error result raised as a tool error."""
        executor = ToolExecutor(
            self.client(ctx), self.session(session_id),
            tools=(ARCHIVE_EXPAND, TOOL_OUTPUT_READ, MEMORY_SEARCH, MEMORY_STORE, MEMORY_FORGET),
        )  # fmt: skip
        try:
            run = await executor.run(name, args)
        except WmError as exc:
            raise ToolError(
                f"the service could not answer now ({exc.message}); retry later"
            ) from exc
        if run.is_error:
            raise ToolError(run.content)
        return run.content

    # --- tools and resources -------------------------------------------------------------------
    def _register(self) -> None:
        server = self.server

        @server.tool(annotations=_READ_ONLY)
        async def recall(
            query: Query, ctx: Context, session_id: Session = "",
            all_sessions: Annotated[bool, Field(description="Search every session of the user or tenant.")] = False,
            max_hits: Annotated[int, Field(description=f"At most this many snippets (1-{_rules.MAX_SEARCH_HITS}).")] = 8,
        ) -> str:  # fmt: skip
            """Search the archived (older, summarized-away) messages of the session for words,
            best match first, and return snippets with their archive and message ids. Use it
            before saying something was never discussed; then expand_archive for the full
            text. all_sessions searches every session of the same user or tenant."""
            if not query.strip():
                raise ToolError("recall needs a non-empty query")
            try:
                reply = await self.client(ctx).search_archives(
                    query, session_id="" if all_sessions else self.session(session_id),
                    all_sessions=all_sessions, mode=RECALL_MODE,
                    page_size=max(1, min(max_hits, _rules.MAX_SEARCH_HITS)),
                )  # fmt: skip
            except WmError as exc:
                raise ToolError(f"recall failed: {exc.message}") from exc
            if not reply.hits:
                return f"nothing archived matches {query!r}"
            lines = [f"{len(reply.hits)} of {reply.total_matches} match(es), best first:"]
            hybrid = reply.semantic_recall != api.SEMANTIC_RECALL_UNSPECIFIED
            for hit in reply.hits:
                where = f"{names.session_id(hit.archive)}/" if all_sessions else ""
                lines.append(hit_line(hit, hybrid, where))
            return "\n".join(lines)

        @server.tool(annotations=_READ_ONLY)
        async def expand_archive(
            archive_id: Annotated[str, Field(description="e.g. archive_002, as recall names it.")],
            ctx: Context,
            session_id: Session = "",
        ) -> str:
            """Read the raw messages of one archive (e.g. archive_002, as recall names it),
            oldest first, bounded in size."""
            return await self._run(ctx, session_id, ARCHIVE_EXPAND, {"archive_id": archive_id})

        @server.tool(annotations=_READ_ONLY)
        async def read_tool_output(
            output_id: OutputId, ctx: Context,
            start_line: Annotated[int, Field(description="The first line to read, from 1.")] = 1,
            line_count: Annotated[int, Field(description="How many lines to read.")] = _rules.READ_LINES,
            session_id: Session = "",
        ) -> str:  # fmt: skip
            """Read lines of a large tool output stored whole (its id, like out.m42.0, is named
            in the message that replaced it), from start_line (1-based)."""
            args = {"output_id": output_id, "start_line": start_line, "line_count": line_count}
            return await self._run(ctx, session_id, TOOL_OUTPUT_READ, args)

        @server.tool(annotations=_READ_ONLY)
        async def search_tool_outputs(
            query: Query, ctx: Context, output_id: OutputId = "", session_id: Session = ""
        ) -> str:
            """Find the lines of the session's stored tool outputs that contain a literal text
            (case-insensitive); give output_id to search one output only."""
            if not query.strip():
                raise ToolError("search_tool_outputs needs a non-empty query")
            try:
                reply = await self.client(ctx).search_tool_outputs(
                    self.session(session_id),
                    query,
                    output_id=output_id,
                    page_size=_rules.MAX_SEARCH_HITS,
                )
            except WmError as exc:
                raise ToolError(f"search_tool_outputs failed: {exc.message}") from exc
            if not reply.hits:
                return f"no stored tool output contains {query!r}"
            return "\n".join(
                f"- {names.short_id(h.tool_output)} line {h.line}: {h.snippet}" for h in reply.hits
            )

        @server.tool(annotations=_READ_ONLY)
        async def search_memories(
            query: Query, ctx: Context,
            types: Annotated[list[str] | None, Field(description="Only these memory types (profile, preference, entity, event, decision, procedure).")] = None,
            limit: Annotated[int, Field(description="At most this many memories.")] = 10,
            session_id: Session = "",
        ) -> str:  # fmt: skip
            """Search the long-term memories of the session's user (facts that outlive
            sessions: profile, preferences, entities, events, decisions, procedures), best
            first, with their ids. types filters by those kinds."""
            args = {"query": query, "types": types or [], "limit": limit}
            return await self._run(ctx, session_id, MEMORY_SEARCH, args)

        @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
        async def remember(
            text: Annotated[str, Field(description="The fact, one short self-contained sentence.")],
            type: MemoryKind,
            ctx: Context,
            session_id: Session = "",
        ) -> str:
            """Keep a short, self-contained fact about the user for later sessions. type is
            one of profile, preference, entity, event, decision, procedure. A fact already
            known is not stored twice."""
            args = {"text": text, "type": type}
            return await self._run(ctx, session_id, MEMORY_STORE, args)

        @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
        async def forget(memory_id: MemoryId, ctx: Context, session_id: Session = "") -> str:
            """Erase a long-term memory by its id (as search_memories shows it), when the user
            asks for it or it is wrong. It cannot be undone."""
            return await self._run(ctx, session_id, MEMORY_FORGET, {"memory_id": memory_id})

        @server.tool(annotations=_READ_ONLY)
        async def read_working_memory(ctx: Context, session_id: Session = "") -> str:
            """The session's working memory: the structured summary (goal, state, files,
            errors, decisions, open issues...) of everything archived so far."""
            return await self.working_memory_text(ctx, self.session(session_id))

        @server.tool(annotations=_READ_ONLY)
        async def assemble_context(
            ctx: Context,
            token_budget: Annotated[int, Field(description="The context's size limit in tokens.")] = DEFAULT_TOKEN_BUDGET,
            session_id: Session = "",
            system_prompt: Annotated[str, Field(description="The caller's own system prompt, counted in the budget.")] = "",
        ) -> dict[str, Any]:  # fmt: skip
            """The next model context of the session within token_budget tokens: the working
            memory summary, the raw messages no summary covers yet and the live messages,
            roles alternating, each tool call with its result, plus the text to add to the
            system prompt."""
            try:
                reply = await self.client(ctx).assemble_context(
                    self.session(session_id), token_budget, system_prompt=system_prompt
                )
            except WmError as exc:
                raise ToolError(f"assemble_context failed: {exc.message}") from exc
            return {
                "system_prompt_addition": reply.system_prompt_addition,
                "messages": [
                    {"role": _ROLES.get(m.role, "user"), "content": _message_text(m)}
                    for m in reply.messages
                ],
                "estimated_tokens": reply.estimated_tokens,
                "working_memory_version": reply.working_memory_version,
                "dropped_message_count": reply.dropped_message_count,
                "trimmed_items": list(reply.trimmed_items),
            }

        @server.resource(
            "wm://sessions/{session_id}/working-memory", mime_type="text/markdown",
            description="The session's latest working memory (Markdown, 7 sections).",
        )  # fmt: skip
        async def working_memory_resource(session_id: str, ctx: Context) -> str:
            return await self.working_memory_text(ctx, session_id, error=ResourceError)

        @server.resource(
            "wm://sessions/{session_id}/memories", mime_type="application/json",
            description="The active long-term memories of the session's user (or agent).",
        )  # fmt: skip
        async def memories_resource(session_id: str, ctx: Context) -> str:
            owner = names.owner_name(session=session_id)
            try:
                page = await self.client(ctx).list_memories(owner=owner, page_size=200)
            except WmError as exc:
                raise ResourceError(f"memories of {session_id!r}: {exc.message}") from exc
            types = {number: name for name, number in pb.MemoryType.items()}
            return json.dumps(
                [
                    {"memory_id": names.short_id(m.name),
                     "type": types[m.type].removeprefix("MEMORY_TYPE_").lower(),
                     "text": m.text}
                    for m in page.memories
                ],
                ensure_ascii=False,
            )  # fmt: skip

    async def working_memory_text(
        self, ctx: Context, session_id: str, *, error: type[Exception] = ToolError
    ) -> str:
        try:
            document = await self.client(ctx).get_working_memory(session_id)
        except WmError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND and exc.reason != "SESSION_NOT_FOUND":
                return "(no working memory yet: nothing has been archived and summarized)"
            raise error(f"working memory of {session_id!r}: {exc.message}") from exc
        return document.document


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="wm-mcp", description="The Working Memory Service as an MCP server."
    )
    parser.add_argument("--address", help="the service (default: $WM_ADDRESS or 127.0.0.1:50051)")
    parser.add_argument("--api-key", help=f"API key (default: ${API_KEY_VARIABLE})")
    parser.add_argument(
        "--session", default="", help=f"the default session of the tools (${SESSION_VARIABLE})"
    )
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the interface to listen on")
    parser.add_argument("--port", type=int, default=8765, help="HTTP: the port (path /mcp)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = _arguments(argv)
    wm = WmMcp(
        args.address,
        api_key=args.api_key or os.environ.get(API_KEY_VARIABLE),
        session_id=args.session or os.environ.get(SESSION_VARIABLE, ""),
    )
    if args.transport == "stdio":
        wm.server.run("stdio")
    else:
        wm.server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
