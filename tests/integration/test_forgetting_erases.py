"""Forgetting erases: after DeleteMemory or DeleteSession the text is gone from the SQLite
files themselves (``wm.sqlite3`` and its ``-wal``), while the server runs and after a clean
stop, not only from every read path."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import grpc

from support import commit_flow
from support import wm_names as names
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc


def _files(data: Path) -> list[Path]:
    return [p for p in (data / "wm.sqlite3", data / "wm.sqlite3-wal") if p.exists()]


def _holds(data: Path, marker: bytes) -> list[str]:
    return [p.name for p in _files(data) if marker in p.read_bytes()]


def _until_gone(data: Path, marker: bytes, seconds: float = 20.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while (found := _holds(data, marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_deleted_memories_and_sessions_are_erased_from_the_files(tmp_path: Path) -> None:
    memory_marker = f"zq{secrets.token_hex(8)}memory"
    session_marker = f"zq{secrets.token_hex(8)}session"
    kept_marker = f"zq{secrets.token_hex(8)}kept"
    server = ServerProcess(tmp_path).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            stub.CreateSession(
                api.CreateSessionRequest(session_id="keep", session=pb.Session(user_id="u1"))
            )
            stub.CreateSession(
                api.CreateSessionRequest(session_id="gone", session=pb.Session(user_id="u2"))
            )

            def remember(text: str) -> str:
                reply = stub.CreateMemory(
                    api.CreateMemoryRequest(
                        owner="users/u1", memory=pb.Memory(type=pb.MEMORY_TYPE_ENTITY, text=text)
                    )
                )
                return reply.memory.name

            forgotten = remember(f"The door code is {memory_marker}")
            remember(f"The printer is called {kept_marker}")
            messages = [
                pb.Message(
                    id=f"m{n}",
                    role=pb.ROLE_USER if n % 2 == 0 else pb.ROLE_ASSISTANT,
                    parts=[pb.Part(text=f"step {n}: the secret word is {session_marker}")],
                )
                for n in range(6)
            ]
            stub.AddMessages(api.AddMessagesRequest(parent="sessions/gone", messages=messages))
            _, events = commit_flow.commit_sync(stub, "gone", 0)
            assert events[-1].terminal
            hits = stub.SearchArchives(
                api.SearchArchivesRequest(parent="sessions/gone", query=session_marker)
            )
            assert hits.hits  # archived and indexed: in the tables and the full-text index
            for marker in (memory_marker, session_marker, kept_marker):
                # On disk before, in the database file itself (checkpointed from the log):
                # what a deletion leaves behind in the file's pages is what is checked.
                deadline = time.monotonic() + 20
                while "wm.sqlite3" not in _holds(tmp_path, marker.encode()):
                    assert time.monotonic() < deadline, marker
                    time.sleep(0.1)

            stub.DeleteMemory(api.DeleteMemoryRequest(name=names.memory(forgotten)))
            stub.DeleteSession(api.DeleteSessionRequest(name="sessions/gone"))
            assert _until_gone(tmp_path, memory_marker.encode()) == []
            assert _until_gone(tmp_path, session_marker.encode()) == []
            assert _holds(tmp_path, kept_marker.encode())  # what was kept stays
            kept = stub.SearchMemories(
                api.SearchMemoriesRequest(owner="users/u1", query=kept_marker)
            )
            assert len(kept.hits) == 1  # the merged index still finds what it holds
    finally:
        assert server.terminate() == 0
    for marker in (memory_marker, session_marker):
        assert _holds(tmp_path, marker.encode()) == [], marker  # after a clean stop too
    assert _holds(tmp_path, kept_marker.encode())


def test_a_purged_user_is_erased_from_the_files(tmp_path: Path) -> None:
    """PurgeUserData: the user's memories and the archived messages of their sessions leave
    the database file and its log; another user's stay."""
    memory_marker = f"zq{secrets.token_hex(8)}usermemory"
    session_marker = f"zq{secrets.token_hex(8)}usersession"
    kept_marker = f"zq{secrets.token_hex(8)}otheruser"
    server = ServerProcess(tmp_path).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            for user, marker in (("dana", memory_marker), ("kim", kept_marker)):
                stub.CreateMemory(
                    api.CreateMemoryRequest(
                        owner=f"users/{user}",
                        memory=pb.Memory(type=pb.MEMORY_TYPE_PROFILE, text=f"Code {marker}"),
                    )
                )
            stub.CreateSession(
                api.CreateSessionRequest(session_id="dana-1", session=pb.Session(user_id="dana"))
            )
            messages = [
                pb.Message(
                    id=f"m{n}",
                    role=pb.ROLE_USER if n % 2 == 0 else pb.ROLE_ASSISTANT,
                    parts=[pb.Part(text=f"note {n}: the passphrase is {session_marker}")],
                )
                for n in range(4)
            ]
            stub.AddMessages(api.AddMessagesRequest(parent="sessions/dana-1", messages=messages))
            _, events = commit_flow.commit_sync(stub, "dana-1", 0)
            assert events[-1].terminal
            for marker in (memory_marker, session_marker, kept_marker):
                deadline = time.monotonic() + 20
                while "wm.sqlite3" not in _holds(tmp_path, marker.encode()):
                    assert time.monotonic() < deadline, marker
                    time.sleep(0.1)

            # The one memory made above and whatever the commit mined from dana's messages
            # (the extractor takes a few of the random markers' sentences for facts).
            owned = sum(
                len(
                    stub.ListMemories(
                        api.ListMemoriesRequest(owner="users/dana", state=state, page_size=1000)
                    ).memories
                )
                for state in (
                    pb.MEMORY_STATE_ACTIVE,
                    pb.MEMORY_STATE_RETIRED,
                    pb.MEMORY_STATE_SUPERSEDED,
                )
            )
            assert owned >= 1
            reply = stub.PurgeUserData(api.PurgeUserDataRequest(user_id="dana"))
            assert (reply.purged_memory_count, reply.purged_session_count) == (owned, 1)
            assert _until_gone(tmp_path, memory_marker.encode()) == []
            assert _until_gone(tmp_path, session_marker.encode()) == []
            assert _holds(tmp_path, kept_marker.encode())
    finally:
        assert server.terminate() == 0
    for marker in (memory_marker, session_marker):
        assert _holds(tmp_path, marker.encode()) == [], marker
    assert _holds(tmp_path, kept_marker.encode())
