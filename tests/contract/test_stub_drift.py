"""The committed stubs are exactly what the protos generate, and the check notices edits."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_protos.py"
STUBS = ROOT / "clients" / "python" / "wm_proto" / "v1"


def _check(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--target", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_committed_stubs_match_generation() -> None:
    result = _check(STUBS)
    assert result.returncode == 0, result.stderr


def test_drift_check_fails_on_a_hand_edited_stub(tmp_path: Path) -> None:
    copy = tmp_path / "v1"
    shutil.copytree(STUBS, copy)
    edited = copy / "resources_pb2.pyi"
    edited.write_text(edited.read_text() + "\n# edited by hand\n")
    result = _check(copy)
    assert result.returncode == 1
    assert "differs: resources_pb2.pyi" in result.stderr


def test_drift_check_fails_on_a_missing_stub(tmp_path: Path) -> None:
    copy = tmp_path / "v1"
    shutil.copytree(STUBS, copy)
    (copy / "working_memory_service_pb2_grpc.py").unlink()
    result = _check(copy)
    assert result.returncode == 1
    assert "missing: working_memory_service_pb2_grpc.py" in result.stderr
