"""The ACLs' index the authorizer decides over, kept in step with the ACLs as they are replayed.

An :class:`AclIndex` holds the ACLs of one generation by resource type: literal name -> ACLs,
and the prefixed ones (few, in practice). Once published it is never changed: the authorizer
hands it to other threads (``Authorizer.pinned``: a Metadata answer of every topic is decided
on a thread over one state of the ACLs).

:class:`AclIndexer` keeps the next one as the ACL records are replayed
(``SecurityMetadata._replay_acl``): copy on write — the first change after a publish copies
the published index's maps (C-level), the first change of a name or a type copies its list,
each ACL added or removed is placed in it — and :meth:`AclIndexer.publish` hands it out. The
work is the records' own (a few hundred nanoseconds an ACL, one copy of the maps per publish
that follows a change), done in whatever step replayed them: bounded as the steps are (a
catch-up applies a bounded number of records a loop step), never every ACL indexed again on
the loop. It is built whole from every ACL once, where the ACLs were loaded (the loader
thread: ``loader.load_cluster``), and again only after a rollback changed the ACLs under it
(a copy that rolls back: never the committed one the authorizer reads).

Pure: no IO, no clock, no threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .acls import WILDCARD_RESOURCE, AclBinding, PatternType, ResourceType


class AclIndex:
    """The ACLs of one generation (see the module doc). ``visited``: the bindings placed to
    make it (built whole: every one; kept by an :class:`AclIndexer`: the ACLs changed since
    the last one published and the lists copied for them)."""

    __slots__ = ("literal", "prefixed", "visited")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self.literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self.prefixed: dict[ResourceType, list[AclBinding]] = {}
        self.visited = 0
        for b in bindings:
            self.visited += 1
            if b.pattern_type is PatternType.LITERAL:
                self.literal.setdefault((b.resource_type, b.resource_name), []).append(b)
            else:
                self.prefixed.setdefault(b.resource_type, []).append(b)

    def of_type(self, resource_type: ResourceType) -> list[AclBinding]:
        out = [b for (t, _n), acls in self.literal.items() if t is resource_type for b in acls]
        return out + list(self.prefixed.get(resource_type, ()))

    def applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        out = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            out += self.literal.get((resource_type, WILDCARD_RESOURCE), ())
        out += [b for b in self.prefixed.get(resource_type, ()) if name.startswith(b.resource_name)]
        return out


class AclIndexer:
    """The index of the ACLs of ``generation`` (built whole from ``bindings``), then kept as
    ACLs are added and removed (:meth:`change`); :meth:`publish` hands out the current one,
    never changed afterwards (see the module doc)."""

    __slots__ = ("_fresh", "_next", "_published", "generation")

    def __init__(self, bindings: Iterable[AclBinding], generation: int) -> None:
        self._published = AclIndex(bindings)
        self._next: AclIndex | None = None
        """The index being made since the last publish (None: no change since)."""
        self._fresh: set[Any] = set()
        """The slots of ``_next`` whose lists were made for it (changed in place)."""
        self.generation = generation
        """The ACLs' generation the index is of (``SecurityMetadata.acl_generation``)."""

    def change(self, binding: AclBinding, added: bool, generation: int) -> None:
        """``binding`` added (True) or removed (False) at ``generation``."""
        nxt = self._next
        if nxt is None:
            published = self._published
            nxt = self._next = AclIndex()
            nxt.literal, nxt.prefixed = dict(published.literal), dict(published.prefixed)
        table: dict[Any, list[AclBinding]]
        slot: Any
        if binding.pattern_type is PatternType.LITERAL:
            table, slot = nxt.literal, (binding.resource_type, binding.resource_name)
        else:
            table, slot = nxt.prefixed, binding.resource_type
        fresh = self._fresh
        acls = table.get(slot)
        if acls is None or slot not in fresh:
            acls = list(acls or ())
            nxt.visited += len(acls)
            fresh.add(slot)
            table[slot] = acls
        if added:
            acls.append(binding)
        else:
            acls.remove(binding)
        nxt.visited += 1
        if not acls:
            del table[slot]
            fresh.discard(slot)
        self.generation = generation

    def fork(self) -> AclIndexer:
        """Another indexer from the index published now on (:meth:`publish`d here), kept
        apart from this one: a staged copy of the ACLs' (``SecurityMetadata.stage``)."""
        out = AclIndexer.__new__(AclIndexer)
        out._published, out._next, out._fresh = self.publish(), None, set()
        out.generation = self.generation
        return out

    def publish(self) -> AclIndex:
        """The index of the ACLs as they are now; never changed afterwards (the next change
        begins another)."""
        nxt = self._next
        if nxt is not None:
            self._published, self._next = nxt, None
            self._fresh = set()
        return self._published
