# The C kernels of assignors/racks_range.py (assignors/_placement.c).
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
