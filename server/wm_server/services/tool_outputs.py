"""Stored tool outputs: read one by lines or bytes, a page at a time, or search them all.

A stored output may be as large as the message size limit allows (up to 64 MiB), larger
than any transport limit; a page is bounded (MAX_PAGE_BYTES, MAX_PAGE_LINES) so that every
response fits, and its token continues the same range. Pages are cut on UTF-8 character
boundaries, so the content of each is valid text.
"""

from __future__ import annotations

from dataclasses import dataclass

from wm_server.errors import NotFound, invalid
from wm_server.services import paging
from wm_server.services.literal_search import Literal, search_terms
from wm_server.services.sessions import find_session
from wm_server.services.snippets import centred
from wm_server.storage.database import Database
from wm_server.storage.records import ToolOutputRecord

MAX_PAGE_BYTES = 1024 * 1024
MAX_PAGE_LINES = 10_000
_TO_END = 2**62
_LINES, _BYTES = 0, 1
_SEARCH_BATCH = 8  # outputs read per query while searching (each up to the message limit)


@dataclass(frozen=True, slots=True)
class OutputPage:
    output: ToolOutputRecord
    content: str
    start_line: int
    line_count: int
    start_byte: int
    byte_count: int
    next_page_token: str


@dataclass(frozen=True, slots=True)
class OutputHit:
    output_id: str
    message_id: str
    line: int
    snippet: str


def _not_found(session_id: str, output_id: str) -> NotFound:
    return NotFound(
        f"tool output {output_id!r} not found in session {session_id!r}",
        reason="TOOL_OUTPUT_NOT_FOUND",
        metadata={"session_id": session_id, "output_id": output_id},
    )


def _line_start(data: bytes, line: int) -> int:
    """Byte offset where 1-based ``line`` starts (len(data) past the last line)."""
    at = 0
    for _ in range(line - 1):
        found = data.find(b"\n", at)
        if found < 0:
            return len(data)
        at = found + 1
    return at


def _boundary(data: bytes, offset: int) -> int:
    """``offset`` moved forward to the start of a character."""
    while offset < len(data) and data[offset] & 0xC0 == 0x80:
        offset += 1
    return offset


def _lines_touched(data: bytes, start: int, end: int) -> int:
    if end <= start:
        return 0
    return data.count(b"\n", start, end) + (0 if data[end - 1] == 0x0A else 1)


def _range_in(request_range: str, start: int, count: int, data: bytes) -> tuple[int, int, int]:
    """(mode, first byte, end byte) of a requested range, validated."""
    if start < 0 or count < 0:
        raise invalid(request_range, "start and length must not be negative", "OUT_OF_RANGE")
    if request_range == "lines":
        first = _line_start(data, max(start, 1))
        end = _line_start(data, max(start, 1) + count) if count else len(data)
        return _LINES, first, end
    first = _boundary(data, min(start, len(data)))
    end = _boundary(data, min(start + count, len(data))) if count else len(data)
    return _BYTES, first, max(first, end)


class ToolOutputService:
    def __init__(self, database: Database, *, tokens: paging.PageTokens) -> None:
        self._db = database
        self._tokens = tokens

    async def read(
        self,
        session_id: str,
        output_id: str,
        request_range: str,
        start: int,
        count: int,
        page_token: str,
    ) -> OutputPage:
        """One page of ``lines`` or ``bytes`` (``request_range``) from ``start`` for
        ``count`` (0: to the end), or the page ``page_token`` continues to."""
        sid = session_id
        if not output_id:
            raise invalid("output_id", "required", "REQUIRED")
        kind = f"tool-output/{output_id}"
        state = self._tokens.decode_numbers(kind, page_token, 3, sid)
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            record = await uow.tool_outputs.get(row.sid, output_id)
        if record is None:
            raise _not_found(sid, output_id)
        data = record.content.encode()
        if state is not None:
            mode, first, end = state
            if not 0 <= first <= end <= len(data) or mode not in (_LINES, _BYTES):
                raise paging.not_a_token()
        else:
            mode, first, end = _range_in(request_range or "lines", start, count, data)
        stop = end
        if mode == _LINES:
            stop = min(stop, _line_start(data[first:], MAX_PAGE_LINES + 1) + first)
        if stop - first > MAX_PAGE_BYTES:
            stop = first + MAX_PAGE_BYTES
            newline = data.rfind(b"\n", first, stop)
            if mode == _LINES and newline >= 0:
                stop = newline + 1  # whole lines, unless one line alone exceeds a page
            while stop > first and data[stop] & 0xC0 == 0x80:
                stop -= 1
        token = self._tokens.encode_numbers(kind, (mode, stop, end), sid) if stop < end else ""
        return OutputPage(
            output=record,
            content=data[first:stop].decode(),
            start_line=data.count(b"\n", 0, first) + 1 if stop > first else 0,
            line_count=_lines_touched(data, first, stop),
            start_byte=first,
            byte_count=stop - first,
            next_page_token=token,
        )

    async def search(
        self, session_id: str, query: str, output_id: str, max_hits: int
    ) -> tuple[list[OutputHit], int]:
        """Matching lines of the session's outputs (whole), in message and line order."""
        sid = session_id
        needle, limit = search_terms(query, max_hits)
        literal = Literal.of(needle, json_rows=False)
        hits: list[OutputHit] = []
        total = 0
        after = (0, -1)
        async with self._db.scanner() as uow:
            row = await find_session(uow, sid)
            while True:
                batch = await uow.tool_outputs.matching(
                    row.sid, literal.prefilter, output_id or None, after, _SEARCH_BATCH
                )
                for record in batch:
                    for number, line in enumerate(record.content.split("\n"), 1):
                        found = literal.find(line)
                        if found is None:
                            continue
                        total += 1
                        if len(hits) < limit:
                            snippet = centred(line, *found)
                            hits.append(
                                OutputHit(record.output_id, record.message_id, number, snippet)
                            )
                if len(batch) < _SEARCH_BATCH:
                    break
                after = (batch[-1].position, batch[-1].part_index)
        return hits, total
