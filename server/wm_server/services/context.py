"""AssembleContext, archive search and the tool definitions a runtime registers."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from wm_core import (
    MEMORY_TYPES,
    RECALLED_MEMORIES,
    UPDATE_TOOL,
    AssembledContext,
    Message,
    PartUsage,
    Role,
    TextPart,
    archive_name,
    assemble,
    estimate_tokens,
    fold_text,
    is_request,
    output_ids,
)
from wm_server.embedding.fusion import Fused
from wm_server.errors import invalid
from wm_server.services import validation
from wm_server.services.archives import archive_seq, message_bytes
from wm_server.services.memories import MemoryService, epoch_to_iso
from wm_server.services.recall import HybridRecall, Semantic
from wm_server.services.sessions import find_session
from wm_server.storage.codec import searchable_text
from wm_server.storage.database import Database
from wm_server.storage.records import MemoryRow, SearchMatch, StoredMessage, WorkingMemoryRecord
from wm_server.storage.text_index import query_words
from wm_server.storage.unit_of_work import UnitOfWork
from wm_server.tenancy import current_tenant

MAX_BUDGET = 10_000_000
MAX_SYSTEM_PROMPT = 1024 * 1024
DEFAULT_HITS = 12
MAX_HITS = 50
SNIPPET = 1500
MAX_QUERY = 1000
MAX_TOOLS = 16
# An assembled context's content in one response, at most (the limit of any response is 16
# MiB; the rest is framing).
MAX_CONTEXT_BYTES = 12 * 1024 * 1024
_JSON_ESCAPED = {'"', "\\"}


# Contexts of fewer messages than this are decoded on every call: the cache pays for itself
# on long sessions, and every cached object also costs each full garbage collection a visit.
CACHED_FROM = 200


class MessageCache:
    """Decoded messages by (session key, position), least recently used first out.

    A stored message never changes: positions are never reused, a session's key is never
    reused, and archiving moves a boundary, not a row. So AssembleContext, which reads every
    uncovered message on every call, decodes each one once per replica instead of once per
    call (on 2,000 messages, most of the call). Bounded by an estimate of the memory held.
    """

    def __init__(self, max_weight: int = 24 * 1024 * 1024) -> None:
        self._items: OrderedDict[tuple[int, int], StoredMessage] = OrderedDict()
        self._weight = 0
        self._max = max_weight

    @staticmethod
    def _weight_of(item: StoredMessage) -> int:
        # The text (about four characters a token) and the objects that hold it.
        return item.message.estimated_tokens * 4 + 160 * len(item.message.parts) + 500

    def run(self, sid: int, start: int, stop: int) -> tuple[list[StoredMessage], int]:
        """The cached messages from ``start`` on, up to the first one missing (or ``stop``),
        and that position."""
        out: list[StoredMessage] = []
        position = start
        while position < stop:
            item = self._items.get((sid, position))
            if item is None:
                break
            self._items.move_to_end((sid, position))
            out.append(item)
            position += 1
        return out, position

    def add(self, sid: int, items: Sequence[StoredMessage]) -> None:
        for item in items:
            key = (sid, item.position)
            if key not in self._items:
                self._weight += self._weight_of(item)
            self._items[key] = item
        while self._weight > self._max and self._items:
            _, old = self._items.popitem(last=False)
            self._weight -= self._weight_of(old)


@dataclass(frozen=True, slots=True)
class Recall:
    """AssembleContext's recall of memories (validated by ``recall_options``)."""

    token_budget: int = 1000
    max_memories: int = 8


DEFAULT_RECALL_TOKENS = 1000
MAX_RECALL_TOKENS = 8000
MIN_RECALL_TOKENS = 50
DEFAULT_RECALLED = 8


def recall_options(enabled: bool, token_budget: int, max_memories: int) -> Recall | None:
    if not enabled:
        return None
    tokens = token_budget or DEFAULT_RECALL_TOKENS
    if not MIN_RECALL_TOKENS <= tokens <= MAX_RECALL_TOKENS:
        raise invalid(
            "memory_recall.token_budget",
            f"must be {MIN_RECALL_TOKENS}-{MAX_RECALL_TOKENS:,}",
            "OUT_OF_RANGE",
        )
    if max_memories < 0:
        raise invalid("memory_recall.max_memories", "must not be negative", "OUT_OF_RANGE")
    return Recall(tokens, min(max_memories or DEFAULT_RECALLED, 50))


RECALL_HEADING = "## Relevant memories (long-term, from earlier sessions; newer messages win)"


@dataclass(frozen=True, slots=True)
class RecallBlock:
    """The recalled memories as they enter the context, and what the recall found."""

    text: str = ""
    ids: tuple[str, ...] = ()
    needed_tokens: int = 0  # the block of every memory found
    found: int = 0
    semantic: Semantic | None = None  # how the memories were ranked (None: no recall ran)

    def usage(self) -> PartUsage:
        return PartUsage(
            RECALLED_MEMORIES, self.needed_tokens, estimate_tokens(self.text) if self.text else 0,
            self.found - len(self.ids),
        )  # fmt: skip


def recall_block(
    rows: Sequence[MemoryRow], budget: int, semantic: Semantic | None = None
) -> RecallBlock:
    """The memories as a Markdown block within ``budget`` tokens, best first (none fit: an
    empty block; the first that does not fit ends the block, so it stays a best-first
    prefix), with the tokens the block of all of them would take."""
    lines = [RECALL_HEADING]
    ids: list[str] = []
    fitted = ""
    fitting = True
    for row in rows:
        dated = epoch_to_iso(row.event_time)
        when = f" ({dated[:10]})" if dated else ""
        lines.append(f"- [{row.type}] {row.text}{when} (memory {row.memory_id})")
        fitting = fitting and estimate_tokens("\n".join(lines)) <= budget
        if fitting:
            ids.append(row.memory_id)
            fitted = "\n".join(lines)
    needed = estimate_tokens("\n".join(lines)) if rows else 0
    return RecallBlock(fitted if ids else "", tuple(ids), needed, len(rows), semantic)


@dataclass(frozen=True, slots=True)
class Assembly:
    """What ContextService.assemble built, for the API to answer with."""

    context: AssembledContext
    working_memory: WorkingMemoryRecord | None  # the version included, if any
    uncovered: list[int]  # archives included raw (no completed WM covers them)
    budget: int  # the budget the context was built for
    recall: RecallBlock  # empty (semantic None) when no recall was asked


def newest_request(messages: Sequence[Message]) -> str:
    """The text of the newest user request (what recall ranks memories against)."""
    for message in reversed(messages):
        if message.role is Role.USER and is_request(message):
            return " ".join(p.text for p in message.parts if isinstance(p, TextPart))
    return ""


class ContextService:
    def __init__(
        self,
        database: Database,
        cache: MessageCache | None = None,
        memories: MemoryService | None = None,
        recall: HybridRecall | None = None,
    ) -> None:
        self._db = database
        self._cache = cache or MessageCache()
        self._memories = memories or MemoryService(database)
        self._recall_search = recall or HybridRecall(None)

    async def assemble(
        self,
        session_id: str,
        token_budget: int,
        system_prompt: str,
        with_json: int = 0,
        tools: Sequence[str] | None = None,
        recall: Recall | None = None,
    ) -> Assembly:
        """The context, the WM it includes, the uncovered archives, the budget used (the
        asked one, or less when that context would not fit in one response: a 10M-token
        budget is 40 MB of text; the limit is MAX_CONTEXT_BYTES, shared with ``with_json``
        JSON copies of the messages) and the memories recalled."""
        sid = validation.session_id(session_id)
        if not 1 <= token_budget <= MAX_BUDGET:
            raise invalid("token_budget", f"must be 1-{MAX_BUDGET:,}", "OUT_OF_RANGE")
        if len(system_prompt.encode()) > MAX_SYSTEM_PROMPT:
            raise invalid("system_prompt", "at most 1 MiB", "TOO_LARGE")
        if tools is not None:
            served = {t["name"] for t in tool_definitions()}
            unknown = sorted(set(tools) - served)
            if len(tools) > MAX_TOOLS or unknown:
                raise invalid(
                    "registered_tools.names",
                    f"at most {MAX_TOOLS} of {', '.join(sorted(served))}"
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
        while True:
            document = wm.document if wm else None
            result = assemble(budget, prompt, document, messages, pointers, tools, live_from)
            parts = [found.usage(), *result.parts] if recall is not None else result.parts
            result = replace(result, parts=parts)
            if block:  # counted in the prompt above; the runtime receives it in the addition
                addition = f"{result.system_prompt_addition}\n\n{block}".strip()
                result = replace(result, system_prompt_addition=addition)
            copies = 1 + int(with_json)
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
        return Assembly(result, included, uncovered, budget, found)

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

    async def search(
        self,
        session_id: str,
        query: str,
        archive_id: str,
        max_hits: int,
        all_sessions: bool,
        user_id: str = "",
        agent_id: str = "",
    ) -> tuple[list[tuple[SearchMatch, str]], int]:
        """Archived messages that contain the literal, folded (``Literal``)."""
        needle, limit = search_terms(query, max_hits)
        sid = None if all_sessions else validation.session_id(session_id)
        seq = archive_seq(archive_id) if archive_id else None
        async with self._db.scanner() as uow:
            names = dict(await self._sessions(uow, sid, owners(user_id, agent_id)))
            return await self._matching(uow, names, seq, needle, limit)

    async def ranked(
        self,
        session_id: str,
        query: str,
        archive_id: str,
        max_hits: int,
        all_sessions: bool,
        user_id: str = "",
        agent_id: str = "",
    ) -> tuple[list[tuple[SearchMatch, str]], int]:
        """Archived messages ranked by BM25 against the query's words (the full-text index),
        best first, newest first among equal scores."""
        needle, limit = search_terms(query, max_hits)
        sid = None if all_sessions else validation.session_id(session_id)
        seq = archive_seq(archive_id) if archive_id else None
        scope = owners(user_id, agent_id)
        words = query_words(needle)
        async with self._db.scanner() as uow:
            sessions = await self._sessions(uow, sid, scope)
            names = dict(sessions)
            terms = uow.archives.terms(needle)
            found, total = await self._recall_search.lexical.ranked(
                uow, list(names), terms, seq, limit
            )
        out = [
            (
                SearchMatch(names[key], number, item.message, score),
                ranked_snippet(item.message, words),
            )
            for key, number, item, score in found
        ]
        return out, total

    async def hybrid(
        self,
        session_id: str,
        query: str,
        archive_id: str,
        max_hits: int,
        all_sessions: bool,
        user_id: str = "",
        agent_id: str = "",
        min_score: float = 0.0,
    ) -> HybridAnswer:
        """Archived messages ranked by BM25 and by meaning, fused (services.recall)."""
        needle, limit = search_terms(query, max_hits)
        check_min_score(min_score)
        sid = None if all_sessions else validation.session_id(session_id)
        seq = archive_seq(archive_id) if archive_id else None
        scope = owners(user_id, agent_id)
        words = query_words(needle)
        vector = await self._recall_search.embed_query(needle)
        out: list[tuple[SearchMatch, str, Fused[tuple[int, int]]]] = []
        async with self._db.scanner() as uow:
            names = dict(await self._sessions(uow, sid, scope))
            terms = uow.archives.terms(needle)
            if not terms:  # only symbols or punctuation: nothing to rank, the literal answers
                found, total = await self._matching(uow, names, seq, needle, limit)
                # A literal hit matches all of the query, lexically: score 1 (min_score <= 1).
                out = [(m, text, Fused((0, 0), 1.0, 1.0, 0.0)) for m, text in found]
                return HybridAnswer(out, total, vector.status, 0)
            hits, total, status, unembedded = await self._recall_search.archives(
                uow, vector, list(names), terms, seq, limit, min_score
            )
            # The hits' messages, all in one statement.
            read = await uow.messages.at([(h.sid, h.position) for h in hits])
            for hit in hits:
                item = read.get((hit.sid, hit.position))
                if item is None:  # its session is being purged
                    continue
                match = SearchMatch(names[hit.sid], hit.seq, item.message, hit.fused.score)
                out.append((match, ranked_snippet(item.message, words), hit.fused))
        return HybridAnswer(out, total, status, unembedded)

    async def _sessions(
        self, uow: UnitOfWork, session_id: str | None, scope: tuple[str | None, str | None]
    ) -> list[tuple[int, str]]:
        """(key, name) of the one session, or of every session of the tenant (of one user or
        agent, when ``scope`` names one)."""
        if session_id is not None:
            return [((await find_session(uow, session_id)).sid, session_id)]
        return await uow.sessions.keys(current_tenant(), *scope)

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

    @staticmethod
    async def _matching(
        uow: UnitOfWork, names: dict[int, str], archive_seq: int | None, needle: str, limit: int
    ) -> tuple[list[tuple[SearchMatch, str]], int]:
        """Archived messages of the sessions ``names`` (key: name) that contain the literal
        (``Literal``), newest archive first, then in message order, with their snippets."""
        literal = Literal.of(needle, json_rows=True)
        found: list[SearchMatch] = []
        total = 0
        for sid, name in names.items():
            for seq, first, last in await uow.archives.listing(sid, archive_seq):
                for message in await uow.messages.containing(sid, first, last, literal.prefilter):
                    if any(literal.folded in fold_text(c) for c in searchable_text(message)):
                        total += 1
                        if len(found) < limit:
                            found.append(SearchMatch(name, seq, message))
        return [(m, snippet(m.message, literal)) for m in found], total


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal as every literal search compares it: folded (``wm_core.fold_text``), with
    the ASCII text rows may be prefiltered by in the database (None: no prefilter)."""

    folded: str
    prefilter: str | None

    @classmethod
    def of(cls, needle: str, *, json_rows: bool) -> Literal:
        folded = fold_text(needle)
        usable = folded.isascii() and folded.isprintable()
        if json_rows:  # rows hold JSON, where quotes and backslashes are escaped
            usable = usable and not (_JSON_ESCAPED & set(folded))
            # A tool call is searched as "name input" but stored as two JSON fields, so a
            # literal may span the space between them ("grep {"); none of its space-separated
            # pieces can: the row must hold the longest one.
            piece = max(folded.split(" "), key=len)
            return cls(folded, piece if usable and piece else None)
        return cls(folded, folded if usable else None)

    def find(self, text: str) -> tuple[int, int] | None:
        """(start, length) in ``text`` of the first match, or None: found on the folded text,
        then mapped back character by character (folding may change lengths: "ß" is "ss")."""
        folded = fold_text(text)
        at = folded.find(self.folded)
        if at < 0:
            return None
        if len(folded) == len(text):
            return at, len(self.folded)
        start, seen = -1, 0
        for index, char in enumerate(text):
            if start < 0 and seen + len(fold_text(char)) > at:
                start = index
            seen += len(fold_text(char))
            if start >= 0 and seen >= at + len(self.folded):
                return start, index + 1 - start
        return max(start, 0), len(text) - max(start, 0)


def search_terms(query: str, max_hits: int) -> tuple[str, int]:
    """The literal a search looks for and how many hits it returns; the same limits for
    every literal search (archives, tool outputs)."""
    needle = query.strip()
    if not needle:
        raise invalid("query", "required", "REQUIRED")
    if len(needle) > MAX_QUERY:
        raise invalid("query", f"at most {MAX_QUERY} characters", "TOO_LARGE")
    if max_hits < 0:
        raise invalid("max_hits", "must not be negative", "OUT_OF_RANGE")
    return needle, min(max_hits or DEFAULT_HITS, MAX_HITS)


def centred(text: str, at: int, width: int, size: int = SNIPPET) -> str:
    """At most ``size`` characters of ``text`` centred on the match at ``at`` of ``width``."""
    if len(text) <= size:
        return text
    start = max(0, min(at + width // 2 - size // 2, len(text) - size))
    return text[start : start + size]


@dataclass(frozen=True, slots=True)
class HybridAnswer:
    hits: list[tuple[SearchMatch, str, Fused[tuple[int, int]]]]
    total: int
    status: Semantic
    unembedded: int


def check_min_score(min_score: float) -> None:
    if not 0.0 <= min_score <= 1.0:
        raise invalid("min_score", "must be 0-1", "OUT_OF_RANGE")


def owners(user_id: str, agent_id: str) -> tuple[str | None, str | None]:
    """The (user, agent) a search over all sessions is restricted to (None: any)."""
    validation.owner_id(user_id, "user_id")
    validation.owner_id(agent_id, "agent_id")
    if user_id and agent_id:
        raise invalid("agent_id", "not together with user_id", "CONFLICT")
    return user_id or None, agent_id or None


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


def snippet(message: Message, literal: Literal) -> str:
    """At most 1,500 characters of the first chunk that matches, centred on the match."""
    for chunk in searchable_text(message):
        found = literal.find(chunk)
        if found is not None:
            return centred(chunk, *found)
    return ""


def ranked_snippet(message: Message, words: Sequence[str]) -> str:
    """At most 1,500 characters of the message's text around its first word of the query."""
    text = " ".join(searchable_text(message))
    lowered = text.lower()
    found = [(at, len(w)) for w in words if (at := lowered.find(w)) >= 0]
    at, width = min(found) if found else (0, 0)
    return centred(text, at, width)


ARCHIVE_EXPAND: dict[str, Any] = {
    "name": "archive_expand",
    "description": (
        "Fetch the original, verbatim messages of one archive of this session. Use it when the "
        "[Session History Summary] mentions something but lacks the exact detail you need "
        "(a command, a file path, a code snippet, a configuration value, an error message). "
        "Archive ids look like archive_001; archive_search results name them."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "archive_id": {
                "type": "string",
                "description": "The archive to expand, e.g. archive_002.",
                "pattern": "^archive_[0-9]{3,}$",
            }
        },
        "required": ["archive_id"],
        "additionalProperties": False,
    },
}

ARCHIVE_SEARCH: dict[str, Any] = {
    "name": "archive_search",
    "description": (
        "Search the archived original messages of this session, best match first: by the "
        "words of the query and by meaning, so a question in your own words finds a message "
        "that says it differently (a query of symbols only, like a bracket, is matched "
        "literally). Use it whenever the summary lacks a detail the user asks about, before "
        "saying something was never mentioned: ask with the concrete words of the question "
        "(names, paths, numbers, dates) and, if the first search misses, once more in other "
        "words; conclude the information is absent only after at least two variants."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What you look for: key words, a short phrase or a question.",
            },
            "archive_id": {
                "type": "string",
                "description": "Optional: search only this archive, e.g. archive_003.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}


TOOL_OUTPUT_READ: dict[str, Any] = {
    "name": "tool_output_read",
    "description": (
        "Read a tool output that was too large to show: the conversation has its synopsis, "
        "headed [Tool output ID stored in full ...]. Give that id and the lines you need "
        "(the synopsis numbers them, e.g. the error lines); without lines, the output is read "
        "from its first line, as much as fits in one page."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "output_id": {
                "type": "string",
                "description": "The id the synopsis names, e.g. out.m42.1.",
            },
            "start_line": {
                "type": "integer",
                "minimum": 1,
                "description": "Optional: the first line to read (from 1).",
            },
            "line_count": {
                "type": "integer",
                "minimum": 1,
                "description": "Optional: how many lines to read.",
            },
        },
        "required": ["output_id"],
        "additionalProperties": False,
    },
}


MEMORY_SEARCH: dict[str, Any] = {
    "name": "memory_search",
    "description": (
        "Search the user's long-term memories: what earlier sessions learned about them, "
        "their preferences, the entities, events, decisions and procedures of their work. "
        "Ranked by the words of the query, best first; use it before asking the user for "
        "something they may have told you before."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Key words of what you look for."},
            "types": {
                "type": "array",
                "items": {"type": "string", "enum": list(MEMORY_TYPES)},
                "description": "Optional: only memories of these types.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}

MEMORY_STORE: dict[str, Any] = {
    "name": "memory_store",
    "description": (
        "Keep a lasting fact for later sessions: one short sentence the user stated or "
        "confirmed (a preference, who they are, a decision and its reason, a dated event, a "
        "procedure). Not for what matters only in this conversation."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(MEMORY_TYPES)},
            "text": {"type": "string", "maxLength": 2000},
            "event_time": {
                "type": "string",
                "description": "Optional: when it happened, ISO 8601 (2026-03-01).",
            },
        },
        "required": ["type", "text"],
        "additionalProperties": False,
    },
}

MEMORY_FORGET: dict[str, Any] = {
    "name": "memory_forget",
    "description": (
        "Forget a long-term memory for good, when the user asks you to or it is wrong: give "
        "its id (memory_search results and recalled memories name it, e.g. mem_0123...)."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"memory_id": {"type": "string", "pattern": "^mem_[0-9a-f]{20}$"}},
        "required": ["memory_id"],
        "additionalProperties": False,
    },
}


def tool_definitions() -> list[dict[str, Any]]:
    return [
        ARCHIVE_EXPAND, ARCHIVE_SEARCH, TOOL_OUTPUT_READ, dict(UPDATE_TOOL), MEMORY_SEARCH,
        MEMORY_STORE, MEMORY_FORGET,
    ]  # fmt: skip


def openai_shape(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        },
    }


def as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
