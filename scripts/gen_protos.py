"""Generate the Python stubs of protos/wm/v1 into the wm_proto package, or check them.

protoc writes absolute imports from the proto path (``from wm.v1 import resources_pb2``);
we rewrite them to ``wm_proto.v1`` so that the generated code lives in one import package of
ours. The protovalidate rules the contract annotates its fields with
(third_party/buf/validate/validate.proto) are generated beside them as ``buf_validate_pb2``:
no PyPI package ships them for google.protobuf (protovalidate 2 reads descriptors natively),
and a client reading the annotations needs the extension registered. ``--check`` regenerates into a temporary folder and fails when a byte differs from the
committed stubs, which is how CI catches a proto edited without regenerating.

Usage: python scripts/gen_protos.py [--check] [--target DIR]
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
THIRD_PARTY = ROOT / "third_party"
PROTO_PACKAGE_DIR = PROTO_ROOT / "wm" / "v1"
DEFAULT_TARGET = ROOT / "clients" / "python" / "wm_proto" / "v1"
_IMPORT = re.compile(r"^from wm\.v1 import", re.MULTILINE)
_VALIDATE_IMPORT = re.compile(r"^from buf\.validate import validate_pb2", re.MULTILINE)
VALIDATE_PROTO = "buf/validate/validate.proto"
_INIT = '"""Generated protobuf and gRPC stubs of the wm.v1 contract. Do not edit."""\n'


def generate(out_dir: Path) -> None:
    """Run protoc (grpcio-tools' bundled libprotoc) and mypy-protobuf into ``out_dir``."""
    with tempfile.TemporaryDirectory() as raw:
        raw_dir = Path(raw)
        protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_PACKAGE_DIR.glob("*.proto"))
        well_known = Path(grpc_tools.__file__).parent / "_proto"
        bin_dir = Path(sys.executable).parent
        args = [
            "grpc_tools.protoc",
            f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
            f"-I{PROTO_ROOT}",
            f"-I{THIRD_PARTY}",
            f"-I{well_known}",
            f"--python_out={raw_dir}",
            f"--grpc_python_out={raw_dir}",
            f"--mypy_out={raw_dir}",
            f"--mypy_grpc_out={raw_dir}",
            *protos,
            VALIDATE_PROTO,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        generated = [(path, path.name) for path in sorted((raw_dir / "wm" / "v1").iterdir())]
        generated += [
            (path, path.name.replace("validate_pb2", "buf_validate_pb2"))
            for path in sorted((raw_dir / "buf" / "validate").iterdir())
        ]
        for path, name in generated:
            text = _IMPORT.sub("from wm_proto.v1 import", path.read_text())
            text = _VALIDATE_IMPORT.sub("from wm_proto.v1 import buf_validate_pb2", text)
            (out_dir / name).write_text(text)
        (out_dir / "__init__.py").write_text(_INIT)


def check(target: Path) -> int:
    """Return 0 when ``target`` holds exactly what generation makes, else print and return 1."""
    with tempfile.TemporaryDirectory() as fresh:
        fresh_dir = Path(fresh)
        generate(fresh_dir)
        expected = sorted(p.name for p in fresh_dir.iterdir())
        present = sorted(p.name for p in target.iterdir() if p.is_file()) if target.exists() else []
        problems = [f"missing: {n}" for n in expected if n not in present]
        problems += [f"unexpected: {n}" for n in present if n not in expected]
        problems += [
            f"differs: {n}"
            for n in expected
            if n in present and not filecmp.cmp(fresh_dir / n, target / n, shallow=False)
        ]
    if problems:
        print("Generated stubs are out of date (run `make protos`):", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"stubs up to date: {len(expected)} files in {target}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs would change")
    parser.add_argument("--target", type=Path, default=DEFAULT_TARGET)
    args = parser.parse_args()
    if args.check:
        return check(args.target)
    if args.target.exists():
        shutil.rmtree(args.target)
    generate(args.target)
    print(f"generated stubs into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
