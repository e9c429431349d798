"""An undo log that makes in-memory state revertible, like Kafka's timeline structures.

The runtime replays a command's records into memory *before* they are durable (so the next
command sees them). If the durable write then fails, the state must go back to the last durable
point. Every mutation made by ``replay`` goes through :class:`TDict` (a ``dict`` whose writes are
logged) or :meth:`UndoLog.set_attr`, so that :meth:`UndoLog.rollback` can undo them exactly.

Reads on a ``TDict`` are plain ``dict`` reads (no overhead). Logging is off while loading.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import Any, TypeVar

_MISSING: Any = object()
T = TypeVar("T")
_new_dict = dict.__new__


class UndoLog:
    """Positions are absolute: ``mark()`` returns one, ``rollback(m)`` undoes everything logged
    after it, ``release(m)`` forgets entries before it (they are durable and final) — unless
    ``keeps_history`` (the explorer moves back and forth between states with ``rollback``)."""

    __slots__ = ("__weakref__", "_base", "_entries", "enabled", "keeps_history")

    def __init__(self) -> None:
        self._entries: list[tuple[Any, Any, Any, bool]] = []
        self._base = 0
        self.enabled = True
        self.keeps_history = False

    def mark(self) -> int:
        return self._base + len(self._entries)

    def rollback(self, mark: int) -> None:
        if mark < self._base:
            raise ValueError(f"cannot roll back to {mark}: released up to {self._base}")
        entries = self._entries
        while len(entries) > mark - self._base:
            target, key, old, is_attr = entries.pop()
            _put(target, key, old, is_attr)

    def keys_after(self, mark: int, target: dict[Any, Any]) -> list[Any]:
        """The keys of ``target`` (a :class:`TDict` on this log) whose writes were logged
        after ``mark``: those a ``rollback(mark)`` puts back, in the order they were written."""
        if mark < self._base:
            raise ValueError(f"cannot roll back to {mark}: released up to {self._base}")
        return [
            key
            for t, key, _old, is_attr in self._entries[mark - self._base :]
            if t is target and not is_attr
        ]

    def as_of(self, mark: int, fn: Callable[[], T]) -> T:
        """``fn()`` run on the state as it was at ``mark``: everything logged after it is undone,
        ``fn`` runs, whatever ``fn`` logged is undone, then everything after ``mark`` is done
        again, exactly (each entry's later value was noted as it was undone). A read of the
        state as of an earlier point (Kafka's timeline structures read at a snapshot epoch)
        that leaves the state and the log as they were; ``fn`` must change nothing but through
        the log (a read: derived caches at most)."""
        n = mark - self._base
        if n < 0:
            raise ValueError(f"cannot read as of {mark}: released up to {self._base}")
        entries = self._entries
        later = entries[n:]
        undone: list[Any] = []  # each later entry's value after it, in reverse order
        for target, key, old, is_attr in reversed(later):
            undone.append(getattr(target, key) if is_attr else dict.get(target, key, _MISSING))
            _put(target, key, old, is_attr)
        del entries[n:]
        try:
            return fn()
        finally:
            self.rollback(mark)  # what fn logged (derived state)
            for (target, key, _old, is_attr), value in zip(later, reversed(undone), strict=True):
                _put(target, key, value, is_attr)
            entries.extend(later)

    def release(self, mark: int) -> None:
        if self.keeps_history:
            return
        n = min(mark - self._base, len(self._entries))
        if n > 0:
            del self._entries[:n]
            self._base += n

    def forget(self) -> None:
        """Forget every entry, ``keeps_history`` or not: the state they would restore is being
        thrown away (a dropped shard's, ``GroupCoordinatorShard.close``); later marks go on
        from where the last entry was."""
        self._base += len(self._entries)
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def set_attr(self, obj: Any, name: str, value: Any) -> None:
        if self.enabled:
            self._entries.append((obj, name, getattr(obj, name), True))
        object.__setattr__(obj, name, value)

    def new_dicts(self, n: int) -> list[TDict]:
        """``n`` new empty TDicts (a new group has a dozen)."""
        out = list(map(_new_dict, repeat(TDict, n)))
        for d in out:
            d._log = self
        return out

    def new_dict(self, items: Any = None) -> TDict:
        """A new :class:`TDict` (holding the mapping ``items``: nothing to log, as nothing
        referred to it before)."""
        d = _new_dict(TDict)  # what TDict(self) builds, without two Python calls
        d._log = self
        if items:
            dict.update(d, items)
        return d


class TDict(dict[Any, Any]):
    """A dict whose writes are recorded in an :class:`UndoLog`."""

    __slots__ = ("_log",)

    def __init__(self, log: UndoLog) -> None:
        super().__init__()
        self._log = log

    def __setitem__(self, key: Any, value: Any) -> None:
        log = self._log
        if log.enabled:
            log._entries.append((self, key, dict.get(self, key, _MISSING), False))
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        log = self._log
        old = dict.pop(self, key)
        if log.enabled:
            log._entries.append((self, key, old, False))

    def set_many(self, keys: Any, value: Any) -> None:
        """Set every key in ``keys`` to ``value`` (one C-level update; logged entry by entry)."""
        log = self._log
        if log.enabled:
            get = dict.get
            log._entries.extend((self, k, get(self, k, _MISSING), False) for k in keys)
        dict.update(self, dict.fromkeys(keys, value))

    def del_many(self, keys: Any) -> None:
        """Delete every key in ``keys`` (all must be present)."""
        log = self._log
        pop = dict.pop
        if log.enabled:
            log._entries.extend((self, k, pop(self, k), False) for k in keys)
        else:
            for k in keys:
                pop(self, k)

    def discard(self, key: Any) -> None:
        """Delete ``key`` if present."""
        if key in self:
            self.__delitem__(key)

    def increment(self, key: Any, delta: int) -> None:
        """Add ``delta`` to a counter; a counter reaching zero is removed."""
        value = dict.get(self, key, 0) + delta
        if value:
            self[key] = value
        else:
            self.discard(key)

    # Mutators that would bypass the log are forbidden: use the methods above.
    def _forbidden(self, *_a: Any, **_k: Any) -> Any:
        raise TypeError("TDict: use item assignment, del, discard or increment")

    pop = popitem = setdefault = update = clear = __ior__ = _forbidden


def _put(target: Any, key: Any, value: Any, is_attr: bool) -> None:
    """Set ``target``'s attribute or dict entry ``key`` back to ``value`` (for an entry,
    ``_MISSING``: none)."""
    if is_attr:
        object.__setattr__(target, key, value)
    elif value is _MISSING:
        dict.pop(target, key, None)
    else:
        dict.__setitem__(target, key, value)
