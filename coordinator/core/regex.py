"""Regex subscriptions (Kafka 4.0, KIP-848 "Regex Based Subscription").

Patterns use RE2 syntax (google-re2, the same engine family as Kafka's RE2/J: linear time, no
back-references or look-around) and must match a *whole* topic name. Compiled patterns are
cached; resolution is a pure function of the pattern and the topic names.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import re2

from .errors import InvalidRegularExpressionError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> re2._Regexp:
    """Compile or raise INVALID_REGULAR_EXPRESSION with RE2's reason."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."
        ) from None


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """Topic names the pattern fully matches."""
    compiled = compile_regex(pattern)
    return frozenset(name for name in topic_names if compiled.fullmatch(name) is not None)
