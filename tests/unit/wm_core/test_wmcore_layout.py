"""The engine's layout: a public facade, private modules that nothing outside imports."""

from __future__ import annotations

import tomllib
from pathlib import Path

import wm_core

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = Path(wm_core.__file__).resolve().parent

# What the server, the clients and the benchmarks use, and what a parallel change relies on.
REQUIRED = {
    "Message", "Part", "Role", "TextPart", "ToolUsePart", "ToolResultPart", "message_tokens",
    "Decision", "Guard", "SectionOp", "OpKind", "MergeResult", "merge", "parse_document",
    "parse_document_detailed", "render_document", "parse_tool_arguments", "ParsedOps",
    "ReadMethod", "CREATE_TOOL", "UPDATE_TOOL", "validate_create_arguments",
    "validate_update_arguments", "normalize_creation", "CreationResult", "CreationRejected",
    "is_working_memory", "section_reminders", "estimate_tokens", "SECTIONS", "ParsedDocument",
    "KEEP", "bullet_items", "item_key", "references", "canonical_name", "SESSION_TITLE",
    "CURRENT_STATE", "TASK_GOALS", "KEY_FACTS", "FILES_CONTEXT", "ERRORS_CORRECTIONS",
    "OPEN_ISSUES",
}  # fmt: skip


def test_the_facade_exports_what_its_users_need() -> None:
    assert set(wm_core.__all__) >= REQUIRED
    assert len(wm_core.__all__) == len(set(wm_core.__all__))
    for name in wm_core.__all__:
        assert getattr(wm_core, name) is not None, name


def test_every_implementation_module_is_private() -> None:
    public = [
        path.name
        for path in PACKAGE.iterdir()
        if path.name not in ("__init__.py", "py.typed", "__pycache__")
        and not path.name.startswith("_")
    ]
    assert public == []


def test_every_private_module_is_banned_outside_the_package() -> None:
    """The lint rule (ruff TID251) only knows the names listed in pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    banned = set(lint["flake8-tidy-imports"]["banned-api"])
    private = {
        "wm_core." + path.name.removesuffix(".py")
        for path in PACKAGE.iterdir()
        if path.name.startswith("_") and path.name not in ("__init__.py", "__pycache__")
    }
    assert private <= banned
    assert "TID251" in lint["select"]
    ignored = {glob for glob, rules in lint["per-file-ignores"].items() if "TID251" in rules}
    assert ignored == {"wm_core/**", "tests/**"}
