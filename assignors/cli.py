"""``kip848 assignors ...``: list what is installed, or run the conformance kit on one.

``kip848 assignors list`` prints every assignor this installation can load, where it comes from
(built-in, an entry point of an installed package, with its version) and the first line of its
docstring; a plugin that fails to load is listed with the reason. ``kip848 assignors check
NAME|module:Class`` is ``python -m assignors.conformance``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kip848 assignors", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="show the installed assignors")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    check = sub.add_parser(
        "check", help="run the conformance kit (same as python -m assignors.conformance)"
    )
    check.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    if args.command == "check":
        from assignors.conformance.__main__ import main as conformance_main

        return conformance_main(args.rest)
    return _list(as_json=args.json)


def _list(*, as_json: bool) -> int:
    from assignors.registry import available_assignors

    rows = available_assignors()
    if as_json:
        for row in rows:
            print(
                json.dumps(
                    {
                        "name": row.name,
                        "source": row.source,
                        "target": row.target,
                        "description": row.description,
                        "error": row.error,
                    }
                )
            )
        return 0 if all(row.error is None for row in rows) else 1
    table = [("NAME", "SOURCE", "DESCRIPTION")]
    for row in rows:
        table.append(
            (row.name, row.source, f"BROKEN: {row.error}" if row.error else row.description)
        )
    widths = [max(len(r[c]) for r in table) for c in range(2)]
    for name, source, text in table:
        print(f"{name:<{widths[0]}}  {source:<{widths[1]}}  {text}".rstrip())
    return 0 if all(row.error is None for row in rows) else 1
