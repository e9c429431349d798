"""The ``kip848`` command. Sub-commands are wired in as their owners land."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "assignors":
        from assignors.cli import main as assignors_main

        return assignors_main(argv[1:])
    print("usage: kip848 {assignors} ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
