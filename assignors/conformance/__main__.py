"""``python -m assignors.conformance NAME|module:Class``: run the conformance kit, print the
report, exit 0 only if every check holds (2 for a usage or loading error)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

MAX_EXAMPLES = 100_000


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi`` (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not lo <= number <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer in {lo}..{hi}, got {text!r}")
        return number

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assignors.conformance",
        description="Check a server-side assignor against the SPI contract and measure its "
        "balance and stickiness.",
    )
    parser.add_argument("assignor", help="a built-in or installed name, or module:Class")
    parser.add_argument(
        "--examples",
        type=_int_in(1, MAX_EXAMPLES),
        default=200,
        help=f"generated groups (default 200, at most {MAX_EXAMPLES})",
    )
    parser.add_argument(
        "--seed", type=_int_in(0, 2**64 - 1), default=0, help="hypothesis seed (default 0)"
    )
    parser.add_argument(
        "--require-balance", action="store_true", help="fail unless the assignor is balanced"
    )
    parser.add_argument(
        "--require-stickiness", action="store_true", help="fail unless the assignor is sticky"
    )
    parser.add_argument(
        "--no-hash-seeds", action="store_true", help="skip the runs under other PYTHONHASHSEEDs"
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    from assignors.conformance import run_conformance
    from assignors.registry import AssignorConfigError

    try:
        report = run_conformance(
            args.assignor,
            examples=args.examples,
            seed=args.seed,
            require_balance=args.require_balance,
            require_stickiness=args.require_stickiness,
            hash_seeds=not args.no_hash_seeds,
        )
    except AssignorConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
