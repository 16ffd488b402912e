"""SearchArchives: the archived messages of a session (or of every session of a tenant, user
or agent) that hold a literal, ranked by BM25, or ranked by BM25 and by meaning, fused.

Each search reads in one scanner unit of work; the ranking is ``services.recall``'s, the
literal and its limits ``services.literal_search``'s, the snippets ``services.snippets``'.
"""

from __future__ import annotations

from dataclasses import dataclass

from wm_core import fold_text
from wm_server.embedding.fusion import Fused
from wm_server.errors import invalid
from wm_server.security.tenancy import current_tenant
from wm_server.services.archives import archive_seq
from wm_server.services.literal_search import Literal, search_terms
from wm_server.services.recall import HybridRecall, Semantic
from wm_server.services.sessions import find_session
from wm_server.services.snippets import ranked_snippet, snippet
from wm_server.storage.codec import searchable_text
from wm_server.storage.database import Database
from wm_server.storage.records import SearchMatch
from wm_server.storage.text_index import query_words
from wm_server.storage.unit_of_work import UnitOfWork


@dataclass(frozen=True, slots=True)
class HybridAnswer:
    """The fused hits (match, snippet, scores), how many matched, how the ranking used
    meaning and how many searched rows had no vector yet."""

    hits: list[tuple[SearchMatch, str, Fused[tuple[int, int]]]]
    total: int
    status: Semantic
    unembedded: int


def check_min_score(min_score: float) -> None:
    if not 0.0 <= min_score <= 1.0:
        raise invalid("min_score", "must be 0-1", "OUT_OF_RANGE")


def owners(user_id: str, agent_id: str) -> tuple[str | None, str | None]:
    """The (user, agent) a search over all sessions is restricted to (None: any). At most
    one is given, each an owner id: the proto's rules, checked at the edge."""
    return user_id or None, agent_id or None


class ArchiveSearchService:
    def __init__(self, database: Database, recall: HybridRecall) -> None:
        self._db = database
        self._recall_search = recall

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
        sid = None if all_sessions else session_id
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
        sid = None if all_sessions else session_id
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
        sid = None if all_sessions else session_id
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
