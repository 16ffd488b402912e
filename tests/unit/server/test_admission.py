"""The budgets of ``wm_server.api.admission`` with a controlled clock: what a caller holds,
when it is refused, with which details, and that the budgets never leak."""

from __future__ import annotations

import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from wm_server.api.admission import (
    ANONYMOUS,
    RATE_LIMITED,
    TOO_MANY_ANONYMOUS_RPCS,
    TOO_MANY_CONCURRENT_RPCS,
    TOO_MANY_OPEN_STREAMS,
    Admission,
    Limits,
)

LIMITS = Limits(
    tenant_rpcs=2, tenant_streams=1, anonymous_rpcs=1, mutations_per_second=10, mutation_burst=2
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _details(status: object) -> tuple[error_details_pb2.ErrorInfo, float | None]:
    assert status is not None
    decoded = status_pb2.Status()
    for key, value in status.trailing_metadata:  # type: ignore[attr-defined]
        if key == rpc_status.GRPC_DETAILS_METADATA_KEY:
            decoded.ParseFromString(value)
    assert decoded.code == code_pb2.RESOURCE_EXHAUSTED
    info = error_details_pb2.ErrorInfo()
    delay = None
    for detail in decoded.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            detail.Unpack(info)
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return info, delay


def test_unary_calls_and_streams_have_separate_budgets_per_tenant() -> None:
    admission = Admission(LIMITS, clock=Clock())
    alpha, beta = admission.budget("alpha"), admission.budget("beta")
    assert admission.budget("alpha") is alpha  # made once
    assert admission.enter(alpha, stream=False, mutating=False) is None
    assert admission.enter(alpha, stream=False, mutating=False) is None
    refused = admission.enter(alpha, stream=False, mutating=False)
    info, delay = _details(refused)
    assert (info.reason, info.metadata["limit"], delay) == (TOO_MANY_CONCURRENT_RPCS, "2", 1.0)
    assert admission.enter(alpha, stream=True, mutating=False) is None  # its own budget
    info, _ = _details(admission.enter(alpha, stream=True, mutating=False))
    assert info.reason == TOO_MANY_OPEN_STREAMS
    assert admission.enter(beta, stream=False, mutating=False) is None  # untouched
    assert admission.enter(beta, stream=True, mutating=False) is None
    admission.leave(alpha, stream=False)
    assert admission.enter(alpha, stream=False, mutating=False) is None
    assert (alpha.rpcs, alpha.streams) == (2, 1)
    assert alpha.rejected == {TOO_MANY_CONCURRENT_RPCS: 1, TOO_MANY_OPEN_STREAMS: 1}
    assert beta.rejected == {}


def test_anonymous_callers_share_one_budget_for_every_kind_of_call() -> None:
    admission = Admission(LIMITS, clock=Clock())
    anonymous = admission.anonymous
    assert anonymous.tenant == ANONYMOUS
    assert admission.enter(anonymous, stream=True, mutating=False) is None
    info, _ = _details(admission.enter(anonymous, stream=False, mutating=False))
    assert (info.reason, info.metadata["scope"]) == (TOO_MANY_ANONYMOUS_RPCS, "anonymous")
    admission.leave(anonymous, stream=True)
    assert anonymous.rpcs == 0
    assert admission.enter(anonymous, stream=False, mutating=False) is None
    assert admission.budgets()[0] is anonymous


def test_the_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    clock = Clock()
    admission = Admission(LIMITS, clock=clock)
    alpha = admission.budget("alpha")

    def mutate() -> object:
        refused = admission.enter(alpha, stream=False, mutating=True)
        if refused is None:
            admission.leave(alpha, stream=False)
        return refused

    assert mutate() is None and mutate() is None  # the burst
    info, delay = _details(mutate())
    assert (info.reason, info.metadata["limit"], info.metadata["burst"]) == (
        RATE_LIMITED,
        "10",
        "2",
    )
    assert delay == pytest.approx(0.1)
    assert admission.enter(alpha, stream=False, mutating=False) is None  # reads pass
    admission.leave(alpha, stream=False)
    clock.now += 0.05
    _, delay = _details(mutate())
    assert delay == pytest.approx(0.05)
    clock.now += 0.05
    assert mutate() is None
    clock.now += 3600  # a long pause refills the burst, no more
    assert [mutate() is None for _ in range(3)] == [True, True, False]
    assert alpha.rejected == {RATE_LIMITED: 3}
    assert alpha.rpcs == 0


def test_a_rate_of_zero_turns_the_bucket_off() -> None:
    limits = Limits(
        tenant_rpcs=1, tenant_streams=1, anonymous_rpcs=1, mutations_per_second=0, mutation_burst=1
    )
    admission = Admission(limits, clock=Clock())
    alpha = admission.budget("alpha")
    for _ in range(100):
        assert admission.enter(alpha, stream=False, mutating=True) is None
        admission.leave(alpha, stream=False)
