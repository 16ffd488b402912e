"""The event loop the server runs on.

Every RPC costs the loop's own bookkeeping several times over (grpc.aio's completion-queue
wakeups, the call's tasks, each await of a storage call): uvloop does that work in C, which
measured ~90 us less loop-thread CPU per call than the standard loop for the same health check
(``bench/service_bench.py`` prints the floor on both). It is the default wherever it installs;
``WM_EVENT_LOOP=asyncio`` keeps the standard loop.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable

from wm_server.config import ConfigurationError, EventLoopName

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: EventLoopName) -> LoopFactory:
    """A factory for the chosen loop; ConfigurationError when ``uvloop`` is asked for and is
    not installed."""
    if choice is EventLoopName.ASYNCIO:
        return asyncio.new_event_loop
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice is EventLoopName.UVLOOP:
            raise ConfigurationError(
                "WM_EVENT_LOOP=uvloop: uvloop is not installed (pip install uvloop)"
            ) from None
        return asyncio.new_event_loop
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: what runs the current coroutine (for the start log line)."""
    return (
        "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
    )
