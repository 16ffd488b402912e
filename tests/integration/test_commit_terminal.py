"""A commit's terminal event is final: only the event that ends the commit says terminal.

RetryCommit runs a failed commit's Phase 2 again and appends the new run to the same log, so
the log of a retried commit holds a FAILED event per failed run. Replayed after the retry,
those say terminal false; the one terminal event is the log's last, and a stream ends there.
"""

from __future__ import annotations

from support import builders as b
from support.providers import Answer, ProgrammableProvider, creation, ops
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.llm.port import LlmError

Stub = service_grpc.WorkingMemoryServiceStub


async def _events(stub: Stub, name: str) -> list[pb.CommitEvent]:
    return [e async for e in stub.WatchCommit(api.WatchCommitRequest(name=name))]


async def test_a_retried_commit_has_one_terminal_event_its_last(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.creates.append(Answer(creation(session_title="Title", current_state="ok")))
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/t", messages=[b.user("first")], create_session_if_missing=True
        )
    )
    first = await stub.CreateCommit(api.CreateCommitRequest(parent="sessions/t"))
    assert (await _events(stub, first.name))[-1].stage == pb.COMMIT_STAGE_COMPLETED

    provider.default_update = Answer(error=LlmError("model overloaded", retryable=True))
    await stub.AddMessages(
        api.AddMessagesRequest(parent="sessions/t", messages=[b.user("the port is 8443", "m2")])
    )
    failing = await stub.CreateCommit(api.CreateCommitRequest(parent="sessions/t"))
    run1 = await _events(stub, failing.name)
    assert run1[-1].stage == pb.COMMIT_STAGE_FAILED and run1[-1].terminal  # final, for now

    provider.default_update = Answer(ops(key_facts_decisions={"op": "APPEND", "items": ["8443"]}))
    retried = await stub.RetryCommit(api.RetryCommitRequest(name=failing.name))
    assert retried.state == pb.COMMIT_STATE_PENDING
    replay = await _events(stub, failing.name)
    assert replay[-1].stage == pb.COMMIT_STAGE_COMPLETED and replay[-1].terminal
    assert [e.terminal for e in replay].count(True) == 1
    failed = [e for e in replay if e.stage == pb.COMMIT_STAGE_FAILED]
    assert failed and not any(e.terminal for e in failed)
    assert [e.sequence for e in replay] == list(range(1, len(replay) + 1))

    # Resuming from just before the old FAILED event still reads on to the real end.
    resumed = [
        e
        async for e in stub.WatchCommit(
            api.WatchCommitRequest(name=failing.name, after_sequence=failed[0].sequence - 1)
        )
    ]
    assert resumed[0].stage == pb.COMMIT_STAGE_FAILED and not resumed[0].terminal
    assert resumed[-1].terminal and resumed[-1].sequence == replay[-1].sequence
