"""Kafka's ``ssl.principal.mapping.rules`` (KIP-371): a client certificate's subject -> the name
of its principal (``User:<name>``).

The rules are a comma-separated list, tried in order; the first that applies gives the name:

* ``DEFAULT`` — the whole distinguished name (RFC 2253 form: ``CN=alice,OU=eng,O=acme``);
* ``RULE:pattern/replacement/`` — applies when the regular expression ``pattern`` matches the
  *whole* name; the name becomes every match of ``pattern`` replaced by ``replacement``
  (Java's ``replaceAll``: ``$1`` is group 1, ``\\$`` a literal ``$``; a group number beyond the
  pattern's groups stays literal, as Kafka keeps it). A final ``L`` or ``U`` (``.../L``)
  lower- or upper-cases the result. ``\\/`` is a ``/`` inside the pattern or replacement, and
  commas may appear inside them.

No rule applies: :class:`NoMatchingRule` (the client is refused, as Kafka refuses it). Pure:
the mapping is built once per listener and applied to each connection's subject.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


class MappingRuleError(ValueError):
    """``ssl.principal.mapping.rules`` that do not parse (the message says where)."""


class NoMatchingRule(LookupError):
    """No rule applies to a subject."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""  # Python's re.sub template
    case: str = ""  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        out = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return out.lower()
        if self.case == "U":
            return out.upper()
        return out


def _read_part(text: str, pos: int, rule: str) -> tuple[str, int]:
    """Text up to the next unescaped ``/`` (escapes kept), and the position after it."""
    out = []
    while pos < len(text):
        ch = text[pos]
        if ch == "\\" and pos + 1 < len(text):
            out.append(text[pos : pos + 2])
            pos += 2
            continue
        if ch == "/":
            return "".join(out), pos + 1
        out.append(ch)
        pos += 1
    raise MappingRuleError(f"Invalid rule: {rule!r} (expected RULE:pattern/replacement/[L|U])")


def _java_replacement(replacement: str, groups: int) -> str:
    """Java's ``replaceAll`` template -> Python's ``re.sub`` template."""
    out = []
    pos = 0
    while pos < len(replacement):
        ch = replacement[pos]
        if ch == "\\" and pos + 1 < len(replacement):
            nxt = replacement[pos + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            pos += 2
            continue
        if ch == "$":
            digits = re.match(r"\d+", replacement[pos + 1 :])
            if digits is None:
                raise MappingRuleError(f"Invalid replacement {replacement!r}: '$' without a group")
            number = digits.group()
            # Kafka's reading: the longest prefix naming an existing group; none: literal.
            while len(number) > 1 and int(number) > groups:
                number = number[:-1]
            if int(number) > groups:
                out.append("$" + digits.group())
            else:
                out.append(f"\\g<{int(number)}>" + digits.group()[len(number) :])
            pos += 1 + len(digits.group())
            continue
        out.append("\\\\" if ch == "\\" else ch)
        pos += 1
    return "".join(out)


def _compile(pattern: str, rule: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MappingRuleError(f"Invalid rule: {rule!r}: bad regular expression: {exc}") from None


class SslPrincipalMapper:
    """The rules of one listener (see the module doc)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.text = "DEFAULT" if rules is None else rules
        self.rules: Sequence[_Rule] = _parse(self.text)

    def name(self, subject: str) -> str:
        """The principal name for ``subject``; :class:`NoMatchingRule` if no rule applies."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        raise NoMatchingRule(f"No ssl.principal.mapping.rules rule applies to '{subject}'")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper({self.text!r})"


def _parse(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t,":
            pos += 1  # empty rules are ignored
        if pos >= len(text):
            break
        start = pos
        if text.startswith("DEFAULT", pos):
            rules.append(_Rule(None))
            pos += len("DEFAULT")
        elif text.startswith("RULE:", pos):
            pos += len("RULE:")
            pattern, pos = _read_part(text, pos, text[start:])
            replacement, pos = _read_part(text, pos, text[start:])
            case = ""
            if pos < len(text) and text[pos] in "LU":
                case = text[pos]
                pos += 1
            compiled = _compile(pattern, text[start:pos])
            rules.append(_Rule(compiled, _java_replacement(replacement, compiled.groups), case))
        else:
            end = text.find(",", pos)
            raise MappingRuleError(
                f"Invalid rule: {text[start : end if end >= 0 else len(text)]!r} (each rule is "
                "DEFAULT or RULE:pattern/replacement/[L|U])"
            )
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] != ",":
            end = text.find(",", pos)
            raise MappingRuleError(
                f"Invalid rule: {text[start : end if end >= 0 else len(text)]!r}, unmatched "
                f"substring: {text[pos : end if end >= 0 else len(text)]!r}"
            )
    return rules
