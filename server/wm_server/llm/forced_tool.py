"""What the vendor providers share: each step of Phase 2 is one call that forces one tool.

Update, repair, creation and memory extraction differ only in their purpose (which system
prompt), the tool the model must call and the user message; a vendor provider implements that
one call, so all four share its retries, error classes and strict-schema handling.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from wm_core import CREATE_TOOL, MEMORY_TOOL, UPDATE_TOOL
from wm_server.llm.port import (
    CreateRequest,
    MemoryRequest,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
)
from wm_server.llm.prompts import (
    create_user_message,
    memory_user_message,
    repair_user_message,
    update_user_message,
)


class ForcedToolProvider(ABC):
    @abstractmethod
    async def _call(self, purpose: Purpose, tool: Mapping[str, Any], user_text: str) -> ModelReply:
        """One model call that must answer with ``tool``."""

    async def update(self, request: UpdateRequest) -> ModelReply:
        return await self._call(Purpose.UPDATE, UPDATE_TOOL, update_user_message(request))

    async def repair(self, request: RepairRequest) -> ModelReply:
        return await self._call(Purpose.REPAIR, UPDATE_TOOL, repair_user_message(request))

    async def create(self, request: CreateRequest) -> ModelReply:
        return await self._call(Purpose.CREATE, CREATE_TOOL, create_user_message(request))

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        return await self._call(Purpose.MEMORY, MEMORY_TOOL, memory_user_message(request))
