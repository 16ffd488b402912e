"""Services reach the gRPC server through its generic handlers only.

The generated ``add_*Servicer_to_server`` functions register every method twice: in a generic
handler (found by a dictionary lookup on the method name) and by name ("registered methods").
grpc.aio keeps one pending request slot per registered method and its accept loop waits on all
of them (``asyncio.wait`` over one task per method plus one) for every call it accepts: with
this service's ~30 methods that wait is paid on the event loop by every RPC, the health check
included. A method found through the generic handler is served the same way (same handler,
same interceptors, same status handling), so the servers here take the generic half only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class HandlerSink(Protocol):
    """What registration needs of a server: somewhere to put generic handlers."""

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[Any]) -> None: ...


class GenericOnly:
    """Stands in for ``server`` in generated ``add_*Servicer_to_server`` calls: passes the
    generic handlers on and drops the by-name copy of the same methods."""

    def __init__(self, server: HandlerSink) -> None:
        self._server = server

    def add(self, add_to_server: Callable[[Any, Any], None], servicer: object) -> None:
        """``add_to_server(servicer, server)``, a generated function, with this in its place."""
        add_to_server(servicer, self)

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[Any]) -> None:
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers: object) -> None:
        return None  # the generic handler above serves these same methods
