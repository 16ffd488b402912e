"""Python client of the Working Memory Service: a typed asyncio client (:class:`WmClient`),
the context engine an agent runtime drives (:class:`ContextEngine`), the executor of the recall
tools a model calls (:class:`ToolExecutor`), and the ``wm`` CLI.

Only the generated stubs (``wm_proto``) and gRPC are used: clients never import the server.
"""

from wm_client.client import WmClient, new_request_id
from wm_client.engine import (
    AfterTurnResult,
    AssembledContext,
    BackgroundCommit,
    CompactOutcome,
    CompactResult,
    ContextEngine,
)
from wm_client.errors import (
    AbortedError,
    AlreadyExistsError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
    WmError,
)
from wm_client.stream import CommitStream, ResumePolicy
from wm_client.tools import MEMORY_TOOLS, RECALL_TOOLS, ToolExecutor, ToolRun

__all__ = [
    "MEMORY_TOOLS",
    "RECALL_TOOLS",
    "AbortedError",
    "AfterTurnResult",
    "AlreadyExistsError",
    "AssembledContext",
    "BackgroundCommit",
    "CommitStream",
    "CompactOutcome",
    "CompactResult",
    "ContextEngine",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "ResumePolicy",
    "ToolExecutor",
    "ToolRun",
    "UnauthenticatedError",
    "UnavailableError",
    "WmClient",
    "WmError",
    "new_request_id",
]
