"""Argument types with Kafka's ranges: every integer the CLI sends is checked against the range of
its wire type (INT32 partitions and counts, INT64 offsets) before anything is sent, and a bad one
is refused naming the flag and the range (argparse: usage line, exit 2)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_int(text: str, lo: int, hi: int) -> int:
    """``text`` as an integer in ``lo..hi``; ValueError naming the range."""
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped) or not lo <= int(stripped) <= hi:
        raise ValueError(f"expected an integer in {lo}..{hi}, got {text!r}")
    return int(stripped)


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``lo..hi`` (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            return parse_int(text, lo, hi)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def positive_seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds > 0 (at most a year)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and <= {MAX_TIMEOUT_S}, got {text!r}"
        )
    return seconds


MAX_TIMEOUT_S = 365 * 24 * 3600
