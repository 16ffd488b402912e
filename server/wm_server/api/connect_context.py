"""The gRPC ``ServicerContext`` of one HTTP call (``api.connect``'s door): what lets the
interceptor and the servicer run a Connect call exactly as a gRPC one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

# The generic names are only the type stubs'; Handler is the door's (api.connect).
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]
else:  # generic only in the type stubs
    Handler = grpc.RpcMethodHandler
    Context = grpc.aio.ServicerContext


class HttpCallContext(Context):
    """A gRPC ``ServicerContext`` backed by one HTTP request, so that the interceptor and the
    servicer run for a Connect call exactly as for a gRPC one.

    What the interceptor records on it (the code, the details, the initial and trailing
    metadata) is what the door writes back in Connect's form; ``abort`` raises gRPC's own
    ``AbortError``, which the wrapper expects. The deadline is the door's timer: when it
    fires, the call's task is cancelled and :meth:`time_remaining` reads 0, so the wrapper
    logs DEADLINE_EXCEEDED as it would for gRPC."""

    def __init__(
        self,
        metadata: grpc.aio.Metadata,
        peer: str,
        deadline: float | None,
        on_initial_metadata: Callable[[Sequence[tuple[str, str | bytes]]], Awaitable[None]]
        | None = None,
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = deadline
        self._on_initial = on_initial_metadata
        self.expired = False
        self.initial: tuple[tuple[str, str | bytes], ...] = ()
        self.trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._done = False
        self._callbacks: list[Callable[[Context], None]] = []

    # what the wrapper and the servicer use
    def invocation_metadata(self) -> grpc.aio.Metadata:
        return self._metadata

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        self.initial = tuple(initial_metadata)
        if self._on_initial is not None:
            await self._on_initial(self.initial)

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self.trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> Any:
        return self.trailing

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        self._code = code
        self._details = details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        await self.abort(status.code, status.details, status.trailing_metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> Any:
        return self._code

    def set_details(self, details: str) -> None:
        self._details = details

    def details(self) -> str:
        return self._details

    def time_remaining(self) -> Any:
        if self.expired:
            return 0.0
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def peer(self) -> str:
        return self._peer

    def cancelled(self) -> bool:
        return self._code == grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Any) -> None:
        self._callbacks.append(callback)

    def finish(self) -> None:
        """The call has ended: run the done callbacks once."""
        if self._done:
            return
        self._done = True
        for callback in self._callbacks:
            callback(self)

    # what a servicer of this contract never asks of an HTTP call
    async def read(self) -> Any:
        raise RuntimeError("the HTTP door serves no client-streaming method")

    async def write(self, message: Any) -> None:
        raise RuntimeError("the HTTP door serves streams whose behaviour yields its messages")

    def set_compression(self, compression: grpc.Compression) -> None:
        return None

    def disable_next_message_compression(self) -> None:
        return None

    def peer_identities(self) -> Iterable[bytes] | None:
        return None

    def peer_identity_key(self) -> str | None:
        return None

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        return {}
