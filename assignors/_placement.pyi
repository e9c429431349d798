# The C kernels of rack-aware placement (assignors/_placement.c).
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

SOURCE: str

def deal(
    node: bytes,
    quota: int,
    extra: int,
    node_of: bytes | bytearray,
    stride: int,
    indexes: list[int],
    ones: list[frozenset[int]] | None,
    current: list[frozenset[int]] | None,
) -> list[frozenset[int]] | None: ...
def tally(data: bytes, /) -> dict[int, int]: ...
def fill(
    members: list[Hashable],
    needs: list[int],
    assignments: list[Mapping[Any, frozenset[int]]],
    pool: list[tuple[Any, list[int]]],
    out: dict[Any, Any],
    /,
) -> int: ...
def greedy(
    supplies: Sequence[int],
    capacities: Sequence[int],
    weights: Sequence[Sequence[int]],
    extras: int,
    extra_room: Sequence[int],
    order: Sequence[tuple[int, int, int]],
    /,
) -> tuple[list[list[int]], list[int], bool] | None: ...
