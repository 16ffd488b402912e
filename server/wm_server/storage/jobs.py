"""The Phase 2 job queue: claims, leases, requeues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wm_server.storage.repository import Repository
from wm_server.storage.statements import Read, Write

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class ClaimableJob:
    commit_id: str
    sid: int
    seq: int
    attempts: int
    create_time: float = 0.0  # when the job was queued (or requeued by RetryCommit)
    # Whether another job was claimable beside this one when it was found (its lock aside):
    # only then is another claiming loop worth waking.
    others: bool = True


class JobRepository(Repository):
    async def enqueue(self, commit_id: str, sid: int, seq: int, now: float) -> None:
        await self._conn.run(
            "INSERT INTO phase2_jobs (commit_id, sid, seq, state, not_before, create_time)"
            f" VALUES (:id, :sid, :seq, 'queued', {self._dialect.now}, :now)",
            {"id": commit_id, "sid": sid, "seq": seq, "now": now},
        )

    def _claimable(self, job: str) -> str:
        """The condition that the job row ``job`` (an alias) is claimable: runnable (queued
        and due, or running under an expired lease) with no earlier unfinished job of its
        session."""
        now = self._dialect.now
        return (
            f"{job}.state <> 'done'"
            f" AND (({job}.state = 'queued' AND {job}.not_before <= {now})"
            f"  OR ({job}.state = 'running' AND {job}.lease_expires < {now}))"
            " AND NOT EXISTS (SELECT 1 FROM phase2_jobs k WHERE k.sid = " + job + ".sid"
            f"  AND k.seq < {job}.seq AND k.state <> 'done')"
        )

    async def next_claimable(self) -> ClaimableJob | None:
        """The oldest runnable job whose session has no earlier unfinished one, and whether
        another one is claimable too."""
        row = await self._conn.one(
            "SELECT j.commit_id, j.sid, j.seq, j.attempts, j.create_time,"
            " EXISTS (SELECT 1 FROM phase2_jobs o WHERE o.commit_id <> j.commit_id AND "
            + self._claimable("o")
            + ") FROM phase2_jobs j WHERE "
            + self._claimable("j")
            + " ORDER BY j.not_before, j.create_time LIMIT 1"
            + self._dialect.skip_locked,
            {},
        )
        if row is None:
            return None
        return ClaimableJob(
            str(row[0]), int(row[1]), int(row[2]), int(row[3]), float(row[4] or 0.0),
            bool(row[5]),
        )  # fmt: skip

    def leasing(self, commit_id: str, attempts: int, token: str, seconds: float) -> Write:
        """The job running under the lease ``token`` for ``seconds``, its attempt counted."""
        return Write(
            "UPDATE phase2_jobs SET state = 'running', attempts = :attempts, lease_token = :token,"
            f" lease_expires = {self._dialect.now} + :seconds WHERE commit_id = :id",
            {"attempts": attempts, "token": token, "seconds": seconds, "id": commit_id},
        )

    async def holder(self, commit_id: str) -> tuple[str, int] | None:
        """The lease token of a running job and its commit's last event number, the job's
        row held until commit (so no other writer appends to the commit meanwhile)."""
        return await self._read(self.holding(commit_id))

    def holding(self, commit_id: str) -> Read[tuple[str, int] | None]:
        """``holder`` as a read."""
        return Read(
            "SELECT j.lease_token, c.last_sequence FROM phase2_jobs j"
            " JOIN commits c ON c.commit_id = j.commit_id"
            " WHERE j.commit_id = :id AND j.state = 'running'" + self._dialect.lock_job,
            {"id": commit_id},
            lambda rows: (
                (str(rows[0][0]), int(rows[0][1])) if rows and rows[0][0] is not None else None
            ),
        )

    def held(self) -> str:
        """``holder``'s check as a condition of a statement: the job of commit ``:id`` runs
        under the lease ``:token``, its row held until commit."""
        return (
            "EXISTS (SELECT 1 FROM phase2_jobs j WHERE j.commit_id = :id AND j.state = 'running'"
            " AND j.lease_token = :token" + self._dialect.lock_job + ")"
        )

    async def renew(self, commit_id: str, token: str, seconds: float) -> bool:
        changed = await self._conn.run(
            f"UPDATE phase2_jobs SET lease_expires = {self._dialect.now} + :seconds"
            " WHERE commit_id = :id AND lease_token = :token AND state = 'running'",
            {"seconds": seconds, "id": commit_id, "token": token},
        )
        return changed == 1

    async def release(self, commit_id: str, token: str) -> None:
        """Back to the queue without counting the attempt."""
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'queued',"
            " attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,"
            f" lease_token = NULL, lease_expires = NULL, not_before = {self._dialect.now}"
            " WHERE commit_id = :id AND lease_token = :token AND state = 'running'",
            {"id": commit_id, "token": token},
        )

    async def requeue(self, commit_id: str, delay: float, *, reset_attempts: bool) -> None:
        """Queue the job again after ``delay``; ``reset_attempts`` (RetryCommit) also starts
        its age afresh, so the wait for a provider outage is counted from the retry."""
        now = self._dialect.now
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'queued', lease_token = NULL, lease_expires = NULL,"
            f" not_before = {now} + :delay,"
            " attempts = CASE WHEN :reset THEN 0 ELSE attempts END,"
            f" create_time = CASE WHEN :reset THEN {now} ELSE create_time END"
            " WHERE commit_id = :id",
            {"delay": delay, "reset": reset_attempts, "id": commit_id},
        )

    def finishing(self, commit_id: str) -> Write:
        return Write(
            "UPDATE phase2_jobs SET state = 'done', lease_token = NULL WHERE commit_id = :id",
            {"id": commit_id},
        )

    async def finish_session(self, sid: int) -> None:
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'done', lease_token = NULL"
            " WHERE sid = :sid AND state <> 'done'",
            {"sid": sid},
        )

    async def open_count(self) -> int:
        row = await self._conn.one("SELECT COUNT(*) FROM phase2_jobs WHERE state <> 'done'", {})
        return int(row[0]) if row else 0
