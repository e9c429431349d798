"""Code and docs of the repository never point at files outside it: no ``../shared``, no
``/work/...`` paths, no other project's API or style documents (the repository's docs carry
the contract: docs/proto.md and the rest). Every file git tracks is read."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(
    r"\.\./shared|/work/(?:shared|main|wt)\b|\bshared/(?:API|STYLE|reference|hooks)\b"
    r"|\b(?:API|STYLE)\.md\b"
)
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    return [ROOT / n.decode() for n in names if n and n.decode() != SELF]


def test_no_file_points_outside_the_repository() -> None:
    files = tracked_text_files()
    assert len(files) > 300
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary (golden stores), or deleted in the working tree
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_pattern_catches_what_it_is_for() -> None:
    for line in (
        "see ../shared/API.md",
        "(shared/API.md)",
        "INVALID_ARGUMENT (API.md)",
        "house style: /work/shared/STYLE.md",
        "cd /work/main",
    ):
        assert OUTSIDE.search(line), line
    for line in ("docs/proto.md", "shared by both protocols", "a shared/exclusive lock"):
        assert not OUTSIDE.search(line), line
