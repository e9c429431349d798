"""What the components of one shard share: configuration, id source, undo log, topics image,
and the two operations every handler uses — :meth:`ShardContext.emit` (append a record to the
result and replay it at once, through the shard's record router) and :meth:`ShardContext.run`
(run a handler; if it raises, undo whatever it had replayed).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from . import records as r
from .commands import IdSource, Result
from .config import GroupCoordinatorConfig
from .errors import IllegalStateError
from .model import TopicsImage
from .timeline import UndoLog

P = ParamSpec("P")
T = TypeVar("T")


class ShardContext:
    __slots__ = ("_replay", "_tokens", "config", "ids", "topics", "undo")

    def __init__(
        self,
        *,
        config: GroupCoordinatorConfig,
        ids: IdSource,
        topics: TopicsImage,
        replay: Callable[[r.Record], None],
    ) -> None:
        self.config = config
        self.ids = ids
        self.topics = topics
        """The current topics image (replaced whole on a metadata update)."""
        self.undo = UndoLog()
        self._replay = replay
        self._tokens = itertools.count(1)

    @property
    def closed(self) -> bool:
        """The shard's partition was dropped (:meth:`close`)."""
        return self._replay is _closed

    def close(self) -> None:
        """The shard's partition was dropped: no record is applied to its state any more (one
        raises ``IllegalStateError``), and what its undo log could restore is forgotten."""
        self._replay = _closed
        self.undo.forget()
        self.undo.enabled = False

    def next_token(self) -> int:
        """A token for a ``Pending`` response: unique in the shard (every component draws from
        this one sequence, so the runtime's parked requests never mix), process-local, never
        reused (not rolled back)."""
        return next(self._tokens)

    def emit(self, result: Result[Any], record: r.Record) -> None:
        """Add ``record`` to the command's result and apply it (the only way state changes)."""
        result.records.append(record)
        self._replay(record)

    def run(self, handler: Callable[P, Result[T]], *args: P.args, **kwargs: P.kwargs) -> Result[T]:
        """Run a handler; if it raises, undo whatever it had replayed (an error leaves no trace)."""
        mark = self.undo.mark()
        try:
            return handler(*args, **kwargs)
        except BaseException:
            self.undo.rollback(mark)
            raise


def _closed(record: r.Record) -> None:
    raise IllegalStateError(
        f"{record.key.TYPE!r} record for the state of a dropped coordinator partition"
    )
