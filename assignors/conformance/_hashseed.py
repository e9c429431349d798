"""``python -m assignors.conformance._hashseed module:Class SEED``: print the digest of the
assignor's results on the kit's seeded groups. Run under several PYTHONHASHSEED values."""

from __future__ import annotations

import sys

from assignors.conformance._runner import digest_results
from assignors.registry import load_assignor


def main(argv: list[str]) -> int:
    target, seed = argv
    print(digest_results(load_assignor(target), int(seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
