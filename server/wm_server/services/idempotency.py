"""One idempotency mechanism for every mutating RPC.

A ``request_id`` is remembered in the same unit of work as its effect, under a key made of
the tenant, the method and the resource (a session, a commit), with a fingerprint of the
request and the outcome needed to answer a retry identically. Before acting, a use case
takes the key's lock (PostgreSQL: a transaction advisory lock, so concurrent retries on any
replica run one after another; SQLite: writers are serialized already) and looks the key up:

- same id, same fingerprint → the stored outcome, nothing done again;
- same id, another fingerprint → FAILED_PRECONDITION ``REQUEST_ID_REUSED``, nothing done;
- a record of a deleted session no longer counts (its session is gone, so a session created
  again under the same name starts afresh), except DeleteSession's own, which still answers
  a retried delete. Records expire after the retention window (``Maintenance`` prunes them).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from wm_server.errors import request_id_reused
from wm_server.security.tenancy import current_tenant
from wm_server.storage.unit_of_work import UnitOfWork


@dataclass(frozen=True, slots=True)
class Request:
    """A mutating request that carries a request_id."""

    method: str
    resource: str
    request_id: str
    fingerprint: str
    tenant: str

    @property
    def key(self) -> str:
        return json.dumps([self.tenant, self.method, self.resource, self.request_id])


def request(
    method: str, resource: str, request_id: str | None, request_fingerprint: str
) -> Request | None:
    """The request to remember, or None when the caller sent no request_id."""
    if not request_id:
        return None
    return Request(method, resource, request_id, request_fingerprint, current_tenant())


async def replay(uow: UnitOfWork, req: Request | None) -> dict[str, Any] | None:
    """The stored outcome of this request, or None when it must run now (under its lock)."""
    if req is None:
        return None
    await uow.requests.lock(req.key)
    found = await uow.requests.find(req.key)
    if found is None or not found.live:
        return None
    if found.fingerprint != req.fingerprint:
        raise request_id_reused(req.request_id, req.method)
    outcome: dict[str, Any] = json.loads(found.outcome)
    return outcome


async def remember(
    uow: UnitOfWork, req: Request | None, sid: int | None, outcome: dict[str, Any]
) -> None:
    """Record the outcome with the effect; ``sid`` ties the record to its session."""
    if req is not None:
        await uow.requests.remember(req.key, sid, req.fingerprint, outcome, time.time())
