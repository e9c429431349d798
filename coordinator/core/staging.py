"""A component's state staged while a batch of records is applied to it in parts.

An append of the cluster log larger than a loop step is replayed a part a step, and every read
must see it whole or not at all (``Partitions._apply_in_parts``). A component whose state is
read meanwhile replays into a copy of it instead (:meth:`Staging.stage`): its reads keep seeing
the state as it was, its replays go to :meth:`Staging.target`, and :meth:`Staging.unstage`
makes the copy what every read sees, at once. The component owns its state (the live value)
and composes a :class:`Staging`, which holds only the copy (group configs, transactional ids'
groups, ACLs and SCRAM credentials).

Sound only while nothing rolls the live state back across the stage (the cluster log's
committed copy, whose undo log is off; the registry with its commands held): a rollback would
restore the live state and leave the copy with what it undid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Staging(Generic[T]):
    """The staged copy of a component's state (see the module doc). ``copy`` makes a copy that
    shares nothing its replays change with what it copies (a map copied whole)."""

    __slots__ = ("_copy", "_staged")

    def __init__(self, copy: Callable[[T], T]) -> None:
        self._copy = copy
        self._staged: T | None = None

    @property
    def staged(self) -> bool:
        """Between :meth:`stage` and :meth:`unstage`."""
        return self._staged is not None

    def stage(self, live: T) -> None:
        """From now on until :meth:`unstage`, replays go to a copy of ``live``. Staging again
        meanwhile changes nothing (the copy keeps what was replayed into it)."""
        if self._staged is None:
            self._staged = self._copy(live)

    def target(self, live: T) -> T:
        """Where a replay writes: the staged copy while staged, else ``live`` itself."""
        staged = self._staged
        return live if staged is None else staged

    def unstage(self, live: T) -> tuple[T, list[T]]:
        """Ends the stage: what every read sees from now on — the copy, with all that was
        replayed since :meth:`stage`; ``live`` when not staged — and what it replaces
        (``[live]``; none when not staged), for the caller to drop when it will (freeing a map
        of 100,000 entries holds the loop a millisecond or more)."""
        staged, self._staged = self._staged, None
        if staged is None:
            return live, []
        return staged, [live]
