"""The deployment files, checked by real tools: hadolint on the Dockerfile, kubernetes-validate
(strict, the Kubernetes OpenAPI schemas) on deploy/k8s.yaml, the compose-spec parser on
deploy/compose.yaml; then what the image must keep (slim base, non-root, runtime install
only, the grpc.health.v1 probe, data on a volume), and the probe itself against a real server.

Building and running the image is tests/deploy/test_container.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose
from dockerfile_parse import DockerfileParser

from support.server_process import ServerProcess, free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
K8S = REPO / "deploy" / "k8s.yaml"
COMPOSE = REPO / "deploy" / "compose.yaml"
BIN = Path(sys.executable).parent


def _tool(name: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / name), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def _final_stage() -> list[dict[str, Any]]:
    instructions = DockerfileParser(path=str(DOCKERFILE)).structure
    last_from = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "FROM")
    return instructions[last_from:]


def _compose() -> dict[str, Any]:
    value = yaml.safe_load(COMPOSE.read_text())  # YAML merge keys resolved, as compose does
    assert isinstance(value, dict)
    return value


# --- the linters ---------------------------------------------------------------------------------
def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = _tool("hadolint", "--failure-threshold", "style", DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_a_real_check() -> None:
    """The same linter fails on a Dockerfile that breaks the rules the image keeps."""
    bad = "FROM python:latest\nRUN pip install working-memory-service\nUSER root\n"
    result = subprocess.run(
        [str(BIN / "hadolint"), "-"], input=bad, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # :latest
    assert "DL3002" in result.stdout  # last USER root


def test_k8s_manifest_is_valid_kubernetes_strictly() -> None:
    result = _tool("kubernetes-validate", "--strict", K8S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == 4


def test_compose_file_is_valid_compose_spec() -> None:
    PyCompose.from_json(json.dumps(_compose()))  # raises ValueError on anything off-spec
    broken = _compose()
    broken["services"]["wm-1"]["depends_on"]["postgres"]["condition"] = "when_ready"
    with pytest.raises(ValueError, match="when_ready"):
        PyCompose.from_json(json.dumps(broken))


# --- what the image keeps ------------------------------------------------------------------------
def test_the_image_is_slim_non_root_runtime_only_with_health_and_a_volume() -> None:
    parser = DockerfileParser(path=str(DOCKERFILE))
    base = next(i["value"] for i in parser.structure if i["instruction"] == "ARG")
    assert base.startswith("PYTHON_IMAGE=python:3.11-slim")  # before the first FROM
    final = _final_stage()
    by_kind: dict[str, list[str]] = {}
    for instruction in final:
        by_kind.setdefault(instruction["instruction"], []).append(instruction["value"])
    assert by_kind["FROM"] == ["${PYTHON_IMAGE}"]
    user = by_kind["USER"][-1]
    assert user.split(":")[0] not in ("0", "root") and user.split(":")[0].isdigit()
    (health,) = by_kind["HEALTHCHECK"]
    assert '"-m", "wm_server.healthcheck"' in health
    env = DockerfileParser(path=str(DOCKERFILE)).envs
    assert json.loads(by_kind["VOLUME"][0]) == [env["WM_DATA_DIR"]]
    every_run = " ".join(i["value"] for i in parser.structure if i["instruction"] == "RUN")
    assert "[dev]" not in every_run and "-e " not in every_run
    # both distributions, not editable (the client with its command line, for operators)
    assert '"./clients/python[cli]" ".[otel]"' in every_run
    assert json.loads(by_kind["ENTRYPOINT"][0]) == ["wm-server"]


def test_k8s_and_compose_run_the_image_as_it_is_built() -> None:
    user = next(i["value"] for i in reversed(_final_stage()) if i["instruction"] == "USER")
    manifests = list(yaml.safe_load_all(K8S.read_text()))
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]
    probes = pod["containers"][0]
    assert probes["readinessProbe"]["grpc"]["port"] == probes["livenessProbe"]["grpc"]["port"]

    services = _compose()["services"]
    replicas = {name: s for name, s in services.items() if name.startswith("wm-")}
    assert len(replicas) == 2
    data_dir = DockerfileParser(path=str(DOCKERFILE)).envs["WM_DATA_DIR"]
    for service in replicas.values():
        assert (
            REPO / "deploy" / service["build"]["context"] / "Dockerfile"
        ).resolve() == DOCKERFILE
        assert "@postgres:5432/" in service["environment"]["WM_DATABASE_URL"]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert any(v.endswith(f":{data_dir}") for v in service["volumes"])
    assert len({s["ports"][0] for s in replicas.values()}) == 2
    assert "healthcheck" in services["postgres"]


# --- the health probe the HEALTHCHECK runs -------------------------------------------------------
def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wm_server.healthcheck", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_probe_says_serving_for_a_real_server_and_fails_without_one(tmp_path: Path) -> None:
    with ServerProcess(tmp_path).start() as server:
        overall = _probe("--address", server.address)
        assert overall.returncode == 0, overall.stderr
        assert overall.stdout.strip() == f"{server.address} (overall): SERVING"
        named = _probe("--address", server.address, "--service", "wm.v1.WorkingMemoryService")
        assert named.returncode == 0 and named.stdout.strip().endswith("SERVING")
        unknown = _probe("--address", server.address, "--service", "no.such.Service")
        assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr
    nobody = _probe("--address", f"127.0.0.1:{free_port()}", "--timeout", "1")
    assert nobody.returncode == 1 and "UNAVAILABLE" in nobody.stderr
