#!/usr/bin/env python3
"""Generate, or check, the Python code of the wire contract (proto/kip848/v1/*.proto).

The generated modules are committed in the client distribution (client/src/kip848/v1/,
shipped in the kip848-client wheel), in the layout of proto/: the proto path is the Python
import path (`-Iproto`: proto/kip848/v1/x.proto -> client/src/kip848/v1/x_pb2.py, module
kip848.v1.x_pb2) and nothing needs rewriting. For every .proto this writes x_pb2.py,
x_pb2_grpc.py (grpc_tools' protoc) and the mypy-protobuf stubs x_pb2.pyi, x_pb2_grpc.pyi.

The generators are pinned so the output is byte-for-byte reproducible; the script
refuses to run with other versions installed:

    .venv/bin/python scripts/gen_proto.py            # regenerate in place
    .venv/bin/python scripts/gen_proto.py --check    # exit 1 and list the differing
                                                     # files if regeneration would
                                                     # change anything

The only post-processing is dropping protoc's "# NO CHECKED-IN PROTOBUF GENCODE"
marker line, since checking the code in is exactly what this project does.

Exit status: 0 up to date / written, 1 (--check) out of date, 2 cannot generate
(wrong tool versions, missing plugin, protoc error).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PINS = {"grpcio-tools": "1.85.1", "mypy-protobuf": "5.1.0"}

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"  # the .proto sources
PACKAGE_DIR = PROTO_ROOT / "kip848"
OUT_ROOT = REPO / "client" / "src"  # the generated modules, kip848/v1/ under it
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
MARKER_LINE = b"# NO CHECKED-IN PROTOBUF GENCODE\n"


class GenerationError(Exception):
    """The code cannot be generated reproducibly here (exit status 2)."""


def check_pins() -> None:
    problems = []
    for dist, pinned in PINS.items():
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != pinned:
            problems.append(f"  {dist}=={pinned} is required, found {installed or 'nothing'}")
    if problems:
        raise GenerationError(
            "refusing to generate: the generator versions differ from the pins, so the "
            "output would not match the committed code.\n"
            + "\n".join(problems)
            + f"\nInstall the pins into this interpreter ({sys.executable}), e.g. "
            "`.venv/bin/pip install -e '.[dev]'`, and run the script with it."
        )


def find_plugin(name: str) -> Path:
    # The plugin must come from the environment whose versions check_pins() verified.
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(directory) / name
        if candidate.is_file():
            return candidate
    found = shutil.which(name)
    if found is None:
        raise GenerationError(
            f"cannot find the protoc plugin {name!r} next to {sys.executable}; "
            "is mypy-protobuf installed in this environment?"
        )
    return Path(found)


def proto_sources() -> list[str]:
    sources = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PACKAGE_DIR.rglob("*.proto"))
    if not sources:
        raise GenerationError(f"no .proto files under {PACKAGE_DIR}")
    return sources


def generate(out_dir: Path) -> None:
    """Run protoc over every .proto into out_dir (same layout as proto/)."""
    out = str(out_dir)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--plugin=protoc-gen-mypy={find_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={find_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *proto_sources(),
    ]
    proc = subprocess.run(cmd, check=False, cwd=PROTO_ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GenerationError(
            f"protoc failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}".rstrip()
        )
    for path in out_dir.rglob("*_pb2.py"):
        path.write_bytes(path.read_bytes().replace(MARKER_LINE, b"", 1))


def generated_files(root: Path) -> dict[str, bytes]:
    """Generated files under root/kip848, keyed by path relative to root."""
    files = {}
    base = root / "kip848"
    if base.is_dir():
        for path in base.rglob("*"):
            if path.is_file() and path.name.endswith(GENERATED_SUFFIXES):
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def diff(fresh: dict[str, bytes], committed: dict[str, bytes]) -> dict[str, list[str]]:
    return {
        "changed": sorted(k for k in fresh.keys() & committed.keys() if fresh[k] != committed[k]),
        "missing": sorted(fresh.keys() - committed.keys()),
        "stale": sorted(committed.keys() - fresh.keys()),
    }


def shown(path: str) -> str:
    """A generated file's path as the user sees it: relative to the repository if it is there."""
    full = OUT_ROOT / path
    return full.relative_to(REPO).as_posix() if full.is_relative_to(REPO) else full.as_posix()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and exit 1 if anything differs",
    )
    args = parser.parse_args(argv)
    try:
        check_pins()
        with tempfile.TemporaryDirectory(prefix="kip848-proto-") as tmp:
            generate(Path(tmp))
            fresh = generated_files(Path(tmp))
            committed = generated_files(OUT_ROOT)
            delta = diff(fresh, committed)
            if args.check:
                if not any(delta.values()):
                    print(f"generated code is up to date ({len(fresh)} files)")
                    return 0
                print("generated code is out of date; run: python scripts/gen_proto.py")
                for kind, paths in delta.items():
                    for path in paths:
                        print(f"  {kind}: {shown(path)}")
                return 1
            for path in delta["changed"] + delta["missing"]:
                (OUT_ROOT / path).parent.mkdir(parents=True, exist_ok=True)
                (OUT_ROOT / path).write_bytes(fresh[path])
            for path in delta["stale"]:
                (OUT_ROOT / path).unlink()
            touched = sum(len(v) for v in delta.values())
            print(f"wrote {touched} file(s); {len(fresh)} generated files up to date")
            return 0
    except GenerationError as exc:
        print(f"gen_proto: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
