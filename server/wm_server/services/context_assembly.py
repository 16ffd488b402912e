"""AssembleContext: the context a runtime sends its model, built from the latest working
memory, the messages it does not cover and, when asked, the owner's recalled memories.

The rules of assembly are ``wm_core.assemble``'s; this service reads what they need (through
the message cache), checks the request's limits, keeps the answer within one response and
renders the JSON copies a request asks for, so that the API maps fields and computes none.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from wm_core import (
    AGENT_TOOL_NAMES,
    AssembledContext,
    Message,
    archive_name,
    assemble,
    output_ids,
)
from wm_server import contract
from wm_server.errors import invalid
from wm_server.services.archives import message_bytes
from wm_server.services.context_formats import ContextFormat, render
from wm_server.services.context_recall import Recall, RecallBlock, newest_request, recall_block
from wm_server.services.literal_search import MAX_QUERY
from wm_server.services.memories import MemoryService
from wm_server.services.message_cache import CACHED_FROM, MessageCache
from wm_server.services.recall import HybridRecall
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database
from wm_server.storage.records import StoredMessage, WorkingMemoryRecord

MAX_BUDGET = contract.MAX_TOKEN_BUDGET
MAX_SYSTEM_PROMPT = contract.MAX_SYSTEM_PROMPT
MAX_TOOLS = contract.MAX_REGISTERED_TOOLS
# An assembled context's content in one response, at most (the limit of any response is 16
# MiB; the rest is framing).
MAX_CONTEXT_BYTES = 12 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Assembly:
    """What ContextService.assemble built, for the API to answer with."""

    context: AssembledContext
    working_memory: WorkingMemoryRecord | None  # the version included, if any
    uncovered: list[int]  # archives included raw (no completed WM covers them)
    budget: int  # the budget the context was built for
    recall: RecallBlock  # empty (semantic None) when no recall was asked
    rendered_json: str = ""  # the request in the format asked (context_formats), if any

    @property
    def memory_tokens(self) -> int:
        """The tokens of the recalled memories the context holds."""
        return self.recall.usage().kept_tokens


class ContextService:
    def __init__(
        self,
        database: Database,
        *,
        memories: MemoryService,
        recall: HybridRecall,
    ) -> None:
        self._db = database
        self._cache = MessageCache()  # its own state, not a collaborator: no one else uses it
        self._memories = memories
        self._recall_search = recall

    async def assemble(
        self,
        session_id: str,
        token_budget: int,
        system_prompt: str,
        tools: Sequence[str] | None = None,
        recall: Recall | None = None,
        *,
        fmt: ContextFormat = ContextFormat.UNSPECIFIED,
    ) -> Assembly:
        """The context, the WM it includes, the uncovered archives, the budget used (the
        asked one, or less when that context would not fit in one response: a 10M-token
        budget is 40 MB of text; the limit is MAX_CONTEXT_BYTES, shared with the JSON copy
        of the messages in format ``fmt``, when asked) and the
        memories recalled."""
        sid = session_id
        if not 1 <= token_budget <= MAX_BUDGET:
            raise invalid("token_budget", f"must be 1-{MAX_BUDGET:,}", "OUT_OF_RANGE")
        if len(system_prompt.encode()) > MAX_SYSTEM_PROMPT:
            raise invalid("system_prompt", "at most 1 MiB", "TOO_LARGE")
        if tools is not None:
            unknown = sorted(set(tools) - AGENT_TOOL_NAMES)
            if len(tools) > MAX_TOOLS or unknown:
                raise invalid(
                    "registered_tools.names",
                    f"at most {MAX_TOOLS} of {', '.join(sorted(AGENT_TOOL_NAMES))}"
                    + (f"; unknown: {', '.join(unknown)[:200]}" if unknown else ""),
                    "UNKNOWN_TOOL",
                )
        wm, stored, uncovered, spans = await self._uncovered(sid)
        messages = [s.message for s in stored]
        pointers = _Pointers(stored, spans)
        found = RecallBlock()
        if recall is not None:
            found = await self._recall(sid, messages, recall, token_budget)
        block = found.text
        live_from = next((i for i, s in enumerate(stored) if s.archive_seq is None), len(stored))
        prompt = f"{system_prompt}\n\n{block}" if block else system_prompt
        budget = token_budget
        copies = 1 + int(fmt is not ContextFormat.UNSPECIFIED)
        while True:
            document = wm.document if wm else None
            result = assemble(budget, prompt, document, messages, pointers, tools, live_from)
            parts = [found.usage(), *result.parts] if recall is not None else result.parts
            result = replace(result, parts=parts)
            if block:  # counted in the prompt above; the runtime receives it in the addition
                addition = f"{result.system_prompt_addition}\n\n{block}".strip()
                result = replace(result, system_prompt_addition=addition)
            # Each token is at most 12 UTF-8 bytes (a 3-byte character weighs a quarter token;
            # ids and names are counted in the estimate), plus the framing message_bytes allows
            # per message and part: small contexts are proven to fit without weighing them.
            bound = result.estimated_tokens * 12 + len(result.system_prompt_addition) * 4
            bound += sum(64 + 16 * len(m.parts) for m in result.messages)
            if bound * copies <= MAX_CONTEXT_BYTES:
                break
            size = sum(message_bytes(m) for m in result.messages) * copies
            size += len(result.system_prompt_addition.encode())
            if size <= MAX_CONTEXT_BYTES or budget <= 1:
                break
            budget = max(1, min(budget - 1, int(budget * MAX_CONTEXT_BYTES / size * 0.95)))
        included = wm if result.working_memory_included else None
        rendered = render(fmt, result.messages, system_prompt, result.system_prompt_addition)
        return Assembly(result, included, uncovered, budget, found, rendered)

    async def _recall(
        self, session_id: str, messages: Sequence[Message], recall: Recall, token_budget: int
    ) -> RecallBlock:
        """The recall block for the newest user request: the owner's best memories within the
        recall budget (at most a tenth of the whole budget)."""
        request = newest_request(messages)
        if not request.strip():
            return RecallBlock()
        vector = await self._recall_search.embed_query(request[:MAX_QUERY])
        async with self._db.reader() as uow:
            row = await find_session(uow, session_id)
            found, status = await self._memories.recall(
                uow, row, request, recall.max_memories, vector
            )
        return recall_block(found, min(recall.token_budget, token_budget // 10), status)

    async def _uncovered(
        self, session_id: str
    ) -> tuple[
        WorkingMemoryRecord | None, list[StoredMessage], list[int], list[tuple[int, int, int]]
    ]:
        """The latest WM, the messages it does not cover (archived after the archive it
        covers, then the live ones, in order), the numbers of those archives and their
        (seq, first, last) positions."""
        async with self._db.scanner() as uow:
            row = await find_session(uow, session_id)
            wm = await uow.working_memories.get(row, row.record.wm_version)
            covered = await uow.working_memories.covered_seq(row.sid, wm.version) if wm else 0
            bounds = await uow.archives.bounds(row.sid, covered) if covered else None
            start = bounds[1] + 1 if bounds else 1
            spans = [a for a in await uow.archives.listing(row.sid, None) if a[0] > covered]
            if row.next_position - start < CACHED_FROM:  # short: decoding costs little
                messages = await uow.messages.between(row.sid, start, row.next_position - 1)
                return wm, messages, sorted(s for s, _, _ in spans), spans
            messages, missing = self._cache.run(row.sid, start, row.next_position)
            if missing < row.next_position:
                fresh = await uow.messages.between(row.sid, missing, row.next_position - 1)
                self._cache.add(row.sid, fresh)
                messages.extend(fresh)
            return wm, messages, sorted(s for s, _, _ in spans), spans


class _Pointers(Mapping[str, str]):
    """Where the model can read a message whole if assembly has to cut it: the stored tool
    output its synopsis stands for (tool_output_read), else the archive it is in
    (archive_expand); a live message is not readable by a tool, so it has none. Worked out
    only for the messages assembly asks about (those it may cut: the current turn)."""

    def __init__(
        self, stored: Sequence[StoredMessage], spans: Sequence[tuple[int, int, int]]
    ) -> None:
        self._by_id = {item.message.id: item for item in stored}
        self._spans = spans

    def __getitem__(self, message_id: str) -> str:
        item = self._by_id[message_id]
        ids = output_ids(item.message)
        if ids:
            return f'tool_output_read(output_id="{ids[0]}")'
        for seq, first, last in self._spans:
            if first <= item.position <= last:
                return f'archive_expand(archive_id="{archive_name(seq)}")'
        raise KeyError(message_id)

    def __iter__(self) -> Iterator[str]:
        return (mid for mid in self._by_id if mid in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)
