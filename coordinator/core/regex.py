"""Regex subscriptions (Kafka 4.0, KIP-848 "Regex Based Subscription").

Patterns use RE2 syntax (google-re2, the same engine family as Kafka's RE2/J: linear time, no
back-references or look-around) and must match a *whole* topic name. Resolution is a pure
function of the pattern and the topic names.

Bounded cost (#13): the service layer refuses patterns longer than
``group.consumer.regex.max.bytes`` before they get here; RE2 compiles each pattern within
``REGEX_MAX_MEMORY`` (a pattern whose program needs more is INVALID_REGULAR_EXPRESSION, "too
complex"); and compiled patterns are cached by *estimated bytes* (``CACHE_MAX_BYTES``), not by
count, least recently used first out. The cache is process-local and soft: it changes no state,
only how often a pattern is compiled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import re2

from .errors import InvalidRegularExpressionError

REGEX_MAX_MEMORY = 1 << 20
"""RE2's memory budget per compiled pattern (program and DFA caches), bytes."""
CACHE_MAX_BYTES = 64 << 20
"""Estimated bytes of compiled patterns kept for reuse."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = REGEX_MAX_MEMORY


def _weight(pattern: str, compiled: re2._Regexp) -> int:
    """Estimated memory of a compiled pattern: the text twice (key and RE2's copy), fixed
    overhead, and RE2's program and DFA caches — which grow with the program (~96 bytes an
    instruction, forward and reverse) but never past ``REGEX_MAX_MEMORY``."""
    return 2 * len(pattern) + 2_048 + min(REGEX_MAX_MEMORY, 96 * compiled.programsize)


class _Cache:
    """A byte-bounded LRU of compiled patterns. The core runs on one thread at a time (the
    runtime's loop, or the loader before serving), so no lock; each step is one dict operation
    anyway, and a lost update could only misjudge the soft budget."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[str, tuple[re2._Regexp, int]] = OrderedDict()

    def get(self, pattern: str) -> re2._Regexp | None:
        item = self._items.pop(pattern, None)
        if item is None:
            return None
        self._items[pattern] = item  # most recently used last
        return item[0]

    def put(self, pattern: str, compiled: re2._Regexp) -> None:
        weight = _weight(pattern, compiled)
        if weight > self.max_bytes:
            return  # never evict everything for one pattern
        old = self._items.pop(pattern, None)
        if old is not None:
            self.bytes -= old[1]
        self._items[pattern] = (compiled, weight)
        self.bytes += weight
        while self.bytes > self.max_bytes and self._items:
            _p, (_c, w) = self._items.popitem(last=False)
            self.bytes -= w

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


_cache = _Cache(CACHE_MAX_BYTES)


def compile_regex(pattern: str) -> re2._Regexp:
    """Compile (or take from the cache) or raise INVALID_REGULAR_EXPRESSION with RE2's
    reason; a pattern RE2 cannot compile within ``REGEX_MAX_MEMORY`` is "too complex"."""
    compiled = _cache.get(pattern)
    if compiled is not None:
        return compiled
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        if "pattern too large" in str(reason):
            reason = f"too complex (RE2 needs more than {REGEX_MAX_MEMORY} bytes to compile it)"
        shown = pattern if len(pattern) <= 200 else pattern[:200] + "..."
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{shown}` is not a valid regular expression: {reason}."
        ) from None
    _cache.put(pattern, compiled)
    return compiled


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """Topic names the pattern fully matches."""
    compiled = compile_regex(pattern)
    return frozenset(name for name in topic_names if compiled.fullmatch(name) is not None)
