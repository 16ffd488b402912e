"""Running the tools a model calls: archive_search, archive_expand, tool_output_read, and
the long-term memory tools memory_search, memory_store and memory_forget.

A runtime registers the definitions GetToolDefinitions serves; when the model calls one, the
runtime hands the call to :class:`ToolExecutor`, which makes the RPC and returns the text of
the tool_result, bounded in size so that a recall never floods the context it is meant to
save. Bad input and the service's refusals (an unknown archive, a bad id) come back as an
error result the model can read and correct; only transport trouble raises. The model reads
and writes short ids (``archive_003``, ``out.m12.0``, ``mem_…``), as the tool schemas say;
the executor turns them into the contract's names and back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wm_client import _rules, names
from wm_client.client import WmClient
from wm_client.errors import InvalidArgumentError, NotFoundError, WmError
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api

ARCHIVE_SEARCH = "archive_search"
ARCHIVE_EXPAND = "archive_expand"
TOOL_OUTPUT_READ = "tool_output_read"
MEMORY_SEARCH = "memory_search"
MEMORY_STORE = "memory_store"
MEMORY_FORGET = "memory_forget"
# The archive tools (a ToolExecutor's default) and the long-term memory tools (added to them
# with ``memory_tools=True``).
RECALL_TOOLS = (ARCHIVE_SEARCH, ARCHIVE_EXPAND, TOOL_OUTPUT_READ)
MEMORY_TOOLS = (MEMORY_SEARCH, MEMORY_STORE, MEMORY_FORGET)
_KNOWN = {*RECALL_TOOLS, *MEMORY_TOOLS}
_MEMORY_TYPES = {
    name.removeprefix("MEMORY_TYPE_").lower(): number
    for name, number in pb.MemoryType.items()
    if number != pb.MEMORY_TYPE_UNSPECIFIED
}
# The default bound of one tool result: below the server's 20,000-character inline
# threshold, so a recalled text is never itself externalized when the runtime stores it.
DEFAULT_MAX_CHARS = _rules.DEFAULT_MAX_CHARS
READ_LINES = _rules.READ_LINES  # lines tool_output_read returns when the model gives no count

# The service could not answer now: the runtime's retry or backoff decides, not the model.
_TRANSIENT = _rules.TOOL_TRANSIENT


def is_transient(error: WmError) -> bool:
    """True when the service could not answer now: the executor raises it (the runtime's
    retry or backoff decides) instead of telling the model the tool failed."""
    return error.code in _TRANSIENT


_ROLES = {pb.ROLE_USER: "user", pb.ROLE_ASSISTANT: "assistant", pb.ROLE_SYSTEM: "system"}


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What to send back as the tool_result: its content and whether it is an error."""

    content: str
    is_error: bool = False

    def anthropic_block(self, tool_use_id: str) -> dict[str, Any]:
        """The Messages API tool_result block for the call ``tool_use_id``."""
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": self.content,
            "is_error": self.is_error,
        }


def hit_basis(hit: api.SearchHit, hybrid: bool) -> str:
    """What a hit of a hybrid answer matched, for the model that reads it: "words",
    "meaning" or both (found by meaning alone, it may be only loosely related), or "weak"
    (the least of the candidates, scored 0 by the fusion's scaling); empty for other modes."""
    if not hybrid:
        return ""
    found = [n for n, part in (("words", hit.lexical_score), ("meaning", hit.dense_score)) if part]
    return " and ".join(found) or "weak"


def hit_line(hit: api.SearchHit, hybrid: bool, where: str = "") -> str:
    """One hit of archive_search (and of the MCP server's recall): where it is, who said it,
    what it matched, and its snippet."""
    role = _ROLES.get(hit.role, "tool")
    basis = hit_basis(hit, hybrid)
    matched = f"; {basis}" if basis else ""
    archive, message = names.short_id(hit.archive), names.short_id(hit.message)
    return f"- {where}{archive}, message {message} ({role}{matched}): {hit.snippet}"


def _bounded(text: str, limit: int, more: str) -> str:
    if len(text) <= limit:
        return text
    note = f"\n[… cut at {limit:,} of {len(text):,} characters; {more}]"
    return text[: max(0, limit - len(note))] + note


def _message_text(message: pb.Message) -> str:
    chunks: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            chunks.append(part.text)
        elif kind == "tool_use":
            chunks.append(f"[tool call {part.tool_use.name} {part.tool_use.input_json}]")
        elif kind == "tool_result":
            error = " (error)" if part.tool_result.is_error else ""
            chunks.append(f"[tool result{error}] {part.tool_result.content}")
    return "\n".join(chunks)


# What the model gave, as it knows it, when the service refuses the name made of it (the
# service's own words spell the name's pattern, which the model never sees).
_ID_HINTS = {
    ARCHIVE_SEARCH: "archive_id must be an archive's id, like archive_001",
    ARCHIVE_EXPAND: "archive_id must be an archive's id, like archive_001",
    TOOL_OUTPUT_READ: "output_id must be a stored output's id, like out.m12.0",
    MEMORY_FORGET: "memory_id must be a memory's id, like mem_0123456789abcdef0123",
}
_NAME_FIELDS = {"name", "archive", "tool_output"}


def _refusal(tool: str, error: InvalidArgumentError) -> str:
    """The service's refusal for the model: a bad id in the model's terms, else its words."""
    if tool in _ID_HINTS and any(v.field in _NAME_FIELDS for v in error.field_violations):
        return _ID_HINTS[tool]
    return error.message


def _own(ident: str) -> str:
    """A model's archive or tool-output id, always of the executor's own session (a name of
    another session given by the model counts as its short id)."""
    return names.short_id(ident)


class ToolExecutor:
    """Runs the recall tools of one session through a :class:`WmClient` (the caller owns it).

    ``names`` lists the tools it runs: register those definitions with the model and pass the
    names to AssembleContext (``registered_tools``) so the system-prompt addition mentions no
    other tool. ``tools`` defaults to the archive tools (RECALL_TOOLS); ``memory_tools=True``
    adds MEMORY_TOOLS to them.
    """

    def __init__(
        self,
        client: WmClient,
        session_id: str,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        tools: tuple[str, ...] = RECALL_TOOLS,
        memory_tools: bool = False,
    ) -> None:
        if memory_tools:
            tools = (*tools, *(t for t in MEMORY_TOOLS if t not in tools))
        if max_chars < 200:
            raise ValueError("max_chars must be at least 200")
        unknown = set(tools) - _KNOWN
        if unknown:
            raise ValueError(f"not a recall tool: {', '.join(sorted(unknown))}")
        self.client = client
        self.session_id = session_id
        self.max_chars = max_chars
        self.names = tools

    async def run(self, name: str, tool_input: Mapping[str, Any] | str) -> ToolRun:
        """Run the model's call of ``name`` with ``tool_input`` (the decoded input, or its
        JSON text) and return the tool_result to send back."""
        if name not in self.names:
            return ToolRun(f"unknown tool {name!r}; available: {', '.join(self.names)}", True)
        if isinstance(tool_input, str):
            try:
                decoded = json.loads(tool_input or "{}")
            except ValueError:
                return ToolRun("the tool input is not valid JSON", True)
        else:
            decoded = dict(tool_input)
        if not isinstance(decoded, dict):
            return ToolRun("the tool input must be a JSON object", True)
        try:
            if name == ARCHIVE_SEARCH:
                return await self._search(decoded)
            if name == ARCHIVE_EXPAND:
                return await self._expand(decoded)
            if name in MEMORY_TOOLS:
                return await self._memory(name, decoded)
            return await self._read(decoded)
        except InvalidArgumentError as exc:
            return ToolRun(f"{name} failed: {_refusal(name, exc)}", True)
        except NotFoundError as exc:
            return ToolRun(f"{name} failed: {exc.message}", True)
        except WmError as exc:
            if is_transient(exc):
                raise
            return ToolRun(f"{name} failed: {exc.message}", True)

    async def _search(self, args: dict[str, Any]) -> ToolRun:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolRun("archive_search needs a non-empty string query", True)
        archive_id = args.get("archive_id") or ""
        if not isinstance(archive_id, str):
            return ToolRun("archive_id must be a string like archive_003", True)
        reply = await self.client.search_archives(
            query,
            session_id=self.session_id,
            archive_id=_own(archive_id),
            mode=api.SEARCH_MODE_HYBRID,
        )
        if not reply.hits:
            return ToolRun(f"nothing archived matches {query!r}")
        lines = [f"{reply.total_matches} matching message(s); best first:"]
        hybrid = reply.semantic_recall != api.SEMANTIC_RECALL_UNSPECIFIED
        lines.extend(hit_line(hit, hybrid) for hit in reply.hits)
        more = "narrow the query or expand an archive for the full text"
        return ToolRun(_bounded("\n".join(lines), self.max_chars, more))

    async def _expand(self, args: dict[str, Any]) -> ToolRun:
        archive_id = args.get("archive_id")
        if not isinstance(archive_id, str) or not archive_id:
            return ToolRun("archive_expand needs archive_id, e.g. archive_002", True)
        out: list[str] = []
        size = 0
        shown = 0
        total = 0
        archive = _own(archive_id)
        async for message in self.client.iter_archive_messages(self.session_id, archive):
            total += 1
            if size >= self.max_chars:
                continue
            role = _ROLES.get(message.role, "tool")
            entry = f"[{role} {message.id}]\n{_message_text(message)}"
            out.append(entry)
            size += len(entry) + 2
            shown += 1
        text = f"{archive_id}: {total} message(s)\n\n" + "\n\n".join(out)
        more = f"{total - shown} later message(s) not shown; search for a keyword instead"
        if shown < total:
            text += f"\n[… {more}]"
        return ToolRun(_bounded(text, self.max_chars, more))

    async def _memory(self, name: str, args: dict[str, Any]) -> ToolRun:
        """memory_search, memory_store and memory_forget, for the session's owner."""
        owner = names.owner_name(session=self.session_id)
        if name == MEMORY_FORGET:
            memory_id = args.get("memory_id")
            if not isinstance(memory_id, str) or not memory_id:
                return ToolRun("memory_forget needs memory_id, e.g. mem_0123...", True)
            await self.client.delete_memory(memory_id)
            return ToolRun(f"forgot {memory_id}")
        if name == MEMORY_STORE:
            kind = _MEMORY_TYPES.get(str(args.get("type", "")))
            text = args.get("text")
            if kind is None or not isinstance(text, str) or not text.strip():
                known = ", ".join(_MEMORY_TYPES)
                return ToolRun(f"memory_store needs text and a type ({known})", True)
            stored = await self.client.create_memory(owner, kind, text)
            verb = "already known as" if stored.deduplicated else "stored as"
            return ToolRun(f"{verb} {names.short_id(stored.memory.name)}")
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolRun("memory_search needs a non-empty string query", True)
        types = [_MEMORY_TYPES[t] for t in args.get("types") or () if t in _MEMORY_TYPES]
        limit = args.get("limit", 0)
        reply = await self.client.search_memories(
            query, owner=owner, types=types, page_size=limit if isinstance(limit, int) else 0
        )
        if not reply.hits:
            return ToolRun(f"no memory matches {query!r}")
        types_of = {number: name for name, number in _MEMORY_TYPES.items()}
        lines = [
            f"- {names.short_id(h.memory.name)} [{types_of.get(h.memory.type, '?')}]"
            f" {h.memory.text}"
            for h in reply.hits
        ]
        return ToolRun(_bounded("\n".join(lines), self.max_chars, "narrow the query"))

    async def _read(self, args: dict[str, Any]) -> ToolRun:
        output_id = args.get("output_id")
        if not isinstance(output_id, str) or not output_id:
            return ToolRun("tool_output_read needs output_id, as the synopsis names it", True)
        start = args.get("start_line", 1)
        count = args.get("line_count", READ_LINES)
        if not isinstance(start, int) or not isinstance(count, int) or start < 1 or count < 1:
            return ToolRun("start_line and line_count must be positive integers", True)
        page = await self.client.get_tool_output(
            self.session_id, _own(output_id), start_line=start, line_count=count
        )
        end = page.start_line + page.line_count - 1
        header = (
            f"{output_id}: lines {page.start_line}-{end} of {page.tool_output.line_count}"
            if page.line_count
            else f"{output_id}: no lines from {start} (it has {page.tool_output.line_count})"
        )
        text = f"{header}\n{page.content}"
        if page.next_page_token or end < min(start + count - 1, page.tool_output.line_count):
            text += f"\n[… continue with start_line={end + 1}]"
        more = "ask for fewer lines or a later start_line"
        return ToolRun(_bounded(text, self.max_chars, more))
