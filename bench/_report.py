"""Shared helpers for benchmark scripts: Markdown tables and docs/benchmarks.md sections.

Each benchmark owns one section of docs/benchmarks.md, delimited by
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``; re-running it replaces only that section.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = "# Benchmarks\n\nEach section is written by the command it shows; re-run it to refresh.\n"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def machine() -> str:
    """One line describing where the numbers were measured."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        rev = "?"
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, commit {rev or '?'}"
    )


def command(script: str, flags: Sequence[tuple[str, object, object]]) -> str:
    """How a benchmark was run: ``python SCRIPT`` with each (flag, value, default) whose value
    is not its default."""
    return f"python {script}" + "".join(
        f" {flag} {value}" for flag, value, default in flags if value != default
    )


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of docs/benchmarks.md with ``body``."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    text = (
        pattern.sub(lambda _m: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    DOC.write_text(text)


def publish(name: str, markdown: str, seconds: float, write: bool) -> None:
    """Print a benchmark's section and how long it took; write it into docs/benchmarks.md."""
    print()
    print(markdown)
    print(f"\n(total {seconds:.0f} s)")
    if write:
        write_section(name, markdown)
        print(f"wrote the '{name}' section of docs/benchmarks.md")


def print_child_result(run: Coroutine[Any, Any, dict[str, Any]]) -> None:
    """A measurement's child process: run it on the server's loop, print its result as JSON."""
    from coordinator.server.loop import run as on_loop

    print(json.dumps(on_loop(run)))


def in_child(script: str, *args: object, timeout: float = 900) -> dict[str, Any]:
    """Run ``script --child ARGS...`` in a fresh process (each measurement on a clean heap)
    and return the JSON result it printed last."""
    done = subprocess.run(
        [sys.executable, script, "--child", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def alternate(
    script: str,
    sizes: Iterable[int],
    repeat: int,
    modes: Sequence[str],
    row: Callable[[dict[str, Any]], list[object]],
) -> tuple[list[dict[str, Any]], list[list[object]]]:
    """Each size ``repeat`` times, its modes (before / after) alternating, each in a fresh
    process (:func:`in_child`): the results, and a table row of each (``row``, then the load
    average before and after it), printed as it comes."""
    results: list[dict[str, Any]] = []
    rows: list[list[object]] = []
    for n in sizes:
        for _ in range(repeat):
            for mode in modes:
                before = os.getloadavg()[0]
                r = in_child(script, n, mode)
                results.append(r)
                rows.append([*row(r), f"{before:.1f}→{os.getloadavg()[0]:.1f}"])
                print(rows[-1], flush=True)
    return results, rows
