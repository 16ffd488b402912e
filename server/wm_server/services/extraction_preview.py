"""Extraction preview: what a commit's memory extraction would keep, without keeping it.

Why it exists: a user who sees a commit keep no memory (or the wrong ones) needs to see what
extraction makes of a conversation, and why each proposed op would be accepted, refused or
found a duplicate, before committing it. The preview runs the same step as Phase 2
(``services.extraction.extract``: the session's provider, the owner's most similar memories,
the guards) over the session's live messages, some of its archives, or given messages, and
returns the plan, with the owner's current memories each accepted op would supersede (found
by ``memory_lifecycle.plan_supersessions``, as the commit's apply step finds them). It only
reads: no memory, commit or event is written, and nothing is sent to a provider when
extraction is off for the session (the answer says so, as a commit would).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from wm_core import MemoryPlan, MemoryVerdict, Message, archive_text
from wm_server import contract
from wm_server.errors import NotFound, Unavailable, invalid
from wm_server.llm.port import LlmError, LlmProvider
from wm_server.security.tenancy import current_tenant
from wm_server.services.archives import archive_seq
from wm_server.services.extraction import (
    QUERY_CHARS,
    SIMILAR_MEMORIES,
    EmptyReason,
    Extraction,
    MemoryContext,
    empty_reason,
    extract,
    message_dates,
)
from wm_server.services.memory_content import MemoryOwner, owner_of, similar_memories
from wm_server.services.memory_lifecycle import plan_supersessions
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database
from wm_server.storage.records import StoredMessage

MAX_ARCHIVES = contract.MAX_PREVIEW_ARCHIVES
# Live messages read at most (the newest are kept: what the next commits would archive).
MAX_LIVE_MESSAGES = 2000


@dataclass(frozen=True, slots=True)
class Superseded:
    """An existing memory an op would supersede."""

    memory_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Preview:
    """The outcome of a dry run: the extraction (its plan has every op and verdict), why it
    would write nothing, how many messages were read, and what each accepted op would
    supersede (by the op's index in the provider's answer, ``MemoryDecision.op_index``)."""

    extraction: Extraction
    empty_reason: EmptyReason | None
    message_count: int
    supersedes: Mapping[int, tuple[Superseded, ...]] = field(default_factory=dict)


class ExtractionPreviewService:
    """PreviewMemoryExtraction."""

    def __init__(
        self,
        database: Database,
        provider_for: Callable[[str | None], LlmProvider],
        *,
        enabled_by_server: bool,
        input_tokens: Callable[[LlmProvider], int],
    ) -> None:
        self._db = database
        self._provider_for = provider_for
        self._enabled_by_server = enabled_by_server
        self._input_tokens = input_tokens

    async def preview(
        self, session_id: str, archive_ids: Sequence[str], given: Sequence[Message]
    ) -> Preview:
        if archive_ids and given:
            raise invalid("archive_ids", "give archive_ids or messages, not both")
        if len(archive_ids) > MAX_ARCHIVES:
            raise invalid("archive_ids", f"at most {MAX_ARCHIVES} archives", "TOO_MANY")
        seqs = [archive_seq(a, f"archive_ids[{i}]") for i, a in enumerate(archive_ids)]
        async with self._db.scanner() as uow:
            row = await find_session(uow, session_id)
            stored: list[StoredMessage] = []
            for index, seq in enumerate(seqs):
                bounds = await uow.archives.bounds(row.sid, seq)
                if bounds is None:
                    raise NotFound(
                        f"archive {archive_ids[index]!r} not found in session {session_id!r}",
                        reason="ARCHIVE_NOT_FOUND",
                        metadata={"session_id": session_id, "archive_id": archive_ids[index]},
                    )
                stored.extend(await uow.messages.between(row.sid, *bounds))
            if not seqs and not given:
                live = await uow.messages.between(row.sid, row.first_live, None)
                stored.extend(live[-MAX_LIVE_MESSAGES:])
            if given:
                today = datetime.now(UTC).date().isoformat()
                messages = [
                    m if m.id else replace(m, id=f"preview-{i + 1}") for i, m in enumerate(given)
                ]
                dates = {m.id: today for m in messages}
            else:
                messages = [m.message for m in stored]
                dates = message_dates(stored)
            owner = owner_of(row)
            off = ""
            if not self._enabled_by_server:
                off = "memory extraction is off on this server"
            elif row.record.config.memory_extraction is False:
                off = "memory extraction is off for this session"
            existing = await similar_memories(
                uow, tenant=current_tenant(), owner=owner,
                text=archive_text(messages)[:QUERY_CHARS], limit=SIMILAR_MEMORIES,
            )  # fmt: skip
            provider = self._provider_for(row.record.config.provider)
        context = MemoryContext(not off, off, owner, tuple(existing))
        try:
            extraction = await extract(
                provider, context, messages=messages, pending=(), archive_id="preview",
                input_tokens=self._input_tokens(provider), message_dates=dates,
            )  # fmt: skip
        except LlmError as error:  # only an outage propagates
            raise Unavailable(
                f"the model provider is unreachable: {error}", reason="LLM_UNAVAILABLE"
            ) from None
        supersedes = await self._supersessions(owner, extraction.plan)
        return Preview(extraction, empty_reason(extraction, None), len(messages), supersedes)

    async def _supersessions(
        self, owner: MemoryOwner, plan: MemoryPlan
    ) -> dict[int, tuple[Superseded, ...]]:
        """The current memories the plan's new facts would supersede, by the op's index in
        the provider's answer."""
        if not plan.ops:
            return {}
        # The guards add each accepted op to plan.ops, in the order of the answer.
        accepted = [d.op_index for d in plan.decisions if d.verdict is MemoryVerdict.ACCEPTED]
        tenant = current_tenant()
        async with self._db.scanner() as uow:
            replacing, _ = await plan_supersessions(uow, tenant, owner, plan.ops)
            ids = list(dict.fromkeys(i for found in replacing.values() for i in found))
            rows = await uow.memories.of_owner(tenant, owner.key, ids) if ids else []
        text = {r.memory_id: r.text for r in rows if r.active}
        return {
            accepted[index]: tuple(Superseded(i, text[i]) for i in found if i in text)
            for index, found in replacing.items()
        }
