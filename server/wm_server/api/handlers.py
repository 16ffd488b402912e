"""Decorators that map service errors to rich statuses at the edge of every RPC.

Service code raises ``ServiceError``; these wrappers abort the call with the matching code
and details. Anything unexpected is logged with its traceback and answered INTERNAL, so a
client never sees UNKNOWN.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from wm_server.api.status import internal_status, status_of_error
from wm_server.errors import ServiceError

log = structlog.get_logger("wm_server.api")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")


def unary(
    fn: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    @functools.wraps(fn)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Resp:
        try:
            return await fn(self, request, context)
        except ServiceError as error:
            await context.abort_with_status(status_of_error(error))
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception:
            log.exception("rpc_failed", rpc=fn.__name__)
            await context.abort_with_status(internal_status())
        raise AssertionError("unreachable: abort_with_status raises")

    return wrapper


def server_stream(
    fn: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
    @functools.wraps(fn)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except ServiceError as error:
            await context.abort_with_status(status_of_error(error))
        except (asyncio.CancelledError, grpc.aio.AbortError, GeneratorExit):
            raise
        except Exception:
            log.exception("rpc_failed", rpc=fn.__name__)
            await context.abort_with_status(internal_status())

    return wrapper
