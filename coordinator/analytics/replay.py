"""The migration what-if's engine: a classic group's membership history replayed through the real
core (a shard from :func:`coordinator.factory.new_shard`, driven by :class:`coordinator.harness.
Harness` on virtual time), as a KIP-848 consumer group or as a cooperative classic group.

:func:`histories` reads a classic group's GroupMetadata records (the export's rows) into what
happened to its membership and when: members joining (at the start of the rebalance that let
them in), leaving or removed (when the record says they were; for records of older builds, at
the rebalance that noticed it), static members coming back under a new member id, subscription
changes. :func:`replay_consumer` and :func:`replay_cooperative` play the same changes at the
same times with client models whose timing follows the protocol:

* **KIP-848** (:func:`replay_consumer`): a member hears of a new target at its next heartbeat
  (every ``group.consumer.heartbeat.interval.ms``, its own phase), gives up what it must revoke
  and acknowledges ``ack_ms`` later, and starts on a partition as soon as its heartbeat answer
  gives it (once the previous owner released it). The server assignor is the one asked for.
* **Cooperative** (:func:`replay_cooperative`): classic members with cooperative-sticky
  (KIP-429): they hear of a rebalance at their next heartbeat (every 3 s), rejoin keeping what
  they own, the leader assigns (:func:`~.clients.cooperative_sticky_assignment`), members give up
  only what moves and rejoin so that it can be assigned.

Each member heartbeats at its own phase (independent of the others'). A member removed in the
history (left, or fenced by a timeout) leaves at that moment in the
replay too: both protocols remove it then, so the session timeout itself is not replayed (the
replay's sessions never expire), and members are only asked to heartbeat while something is
going on — a quiet group costs nothing to replay.

What is measured, from the members' side: rebalances (group epoch bumps; classic generations),
those that stopped nobody (no member that stayed had to give a partition up), partitions moved
(a partition a member gave up, later owned by another member that stayed), unowned
partition-milliseconds (from the moment a partition's owner gave it up, or left, until a member
owns it again) and the time from each rebalance's start until the group is Stable again.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TopicPartition = tuple[str, int]
DAY_MS = 86_400_000
REMOVED_UNKNOWN = "member_left_or_session_timeout"


# ---------------------------------------------------------------------------- history


@dataclass(frozen=True, slots=True)
class Change:
    at_ms: int
    kind: str
    """``join``, ``leave``, ``subscribe`` or ``restart`` (a static member's new incarnation,
    ``member`` -> ``successor``)."""
    member: str
    topics: tuple[str, ...] = ()
    instance_id: str | None = None
    rebalance_timeout_ms: int = 30_000
    successor: str | None = None


@dataclass(slots=True)
class History:
    """One incarnation of a classic group (from its first record to a tombstone or the end)."""

    group_id: str
    start_ms: int
    end_ms: int
    counts_start: bool = True
    """Whether the rebalance that formed it counts (as in the ``rebalances`` table: the group
    was created in the data, not by a downgrade); if not, the replay's first rebalance, which
    only brings the members in, is left out."""
    changes: list[Change] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)


def _ms(t: Any) -> int | None:
    if t is None:
        return None
    if isinstance(t, int):
        return t
    return int(round(t.timestamp() * 1000))


def histories(
    rows: Iterable[Mapping[str, Any]], partitions: Mapping[str, int], *, complete: bool = True
) -> list[History]:
    """A classic group's GroupMetadata rows and ConsumerGroupMetadata tombstones (any order;
    ``ts_ms`` or ``timestamp``) -> its incarnations' membership histories. ``partitions``: each
    topic's partition count (from the journal's topic records); a topic missing there counts
    the partitions its assignments name. ``complete``: the export holds the whole journal."""
    out: list[History] = []
    cur: History | None = None
    prev: list[Mapping[str, Any]] = []
    prev_gen = -1
    consumer_gone = None  # the time of the last consumer group tombstone (a downgrade's)
    for r in sorted(rows, key=lambda r: r["offset"]):
        ts = _ms(r.get("ts_ms", r.get("timestamp")))
        assert ts is not None
        if r["record_type_id"] == 3:
            consumer_gone = ts if r["tombstone"] else consumer_gone
            continue
        if r["tombstone"]:
            if cur is not None:
                cur.end_ms = ts
                out.append(cur)
            cur, prev, prev_gen = None, [], -1
            continue
        members = list(r["classic_members"] or ())
        start = _ms(r["rebalance_preparing_at"])
        at = start if start is not None else ts
        if cur is None:
            downgrade = consumer_gone == ts
            cur = History(
                group_id=r["group_id"],
                start_ms=at,
                end_ms=ts,
                counts_start=not downgrade and (complete or r["generation"] <= 1),
            )
        for m in members:
            for p in m["assigned_partitions"] or ():
                n = cur.partitions.get(p["topic"], 0)
                cur.partitions[p["topic"]] = max(
                    n, p["partition"] + 1, partitions.get(p["topic"], 0)
                )
            for t in m["subscribed_topic_names"] or ():
                if t in partitions:
                    cur.partitions.setdefault(t, partitions[t])
        before = {m["member_id"]: m for m in prev}
        after = {m["member_id"]: m for m in members}
        successors: dict[str, str] = {}
        for old, o in before.items():
            if o["instance_id"] is None or old in after:
                continue
            new = next(
                (
                    k
                    for k, n in after.items()
                    if n["instance_id"] == o["instance_id"] and k not in before
                ),
                None,
            )
            if new is not None:
                successors[old] = new
        removed_at = {
            x["member_id"]: _ms(x["removed_at"])
            for x in r["classic_removed_members"] or ()
            if r["generation"] > prev_gen
        }
        for old, new in successors.items():
            n = after[new]
            cur.changes.append(
                Change(
                    removed_at.get(old) or ts,
                    "restart",
                    old,
                    tuple(n["subscribed_topic_names"] or ()),
                    n["instance_id"],
                    n["rebalance_timeout_ms"],
                    new,
                )
            )
        for mid in before:
            if mid not in after and mid not in successors:
                cur.changes.append(Change(removed_at.get(mid) or at, "leave", mid))
        for mid, n in after.items():
            topics = tuple(n["subscribed_topic_names"] or ())
            if mid not in before and mid not in successors.values():
                cur.changes.append(
                    Change(at, "join", mid, topics, n["instance_id"], n["rebalance_timeout_ms"])
                )
            elif mid in before and tuple(before[mid]["subscribed_topic_names"] or ()) != topics:
                cur.changes.append(Change(at, "subscribe", mid, topics))
        cur.end_ms = ts
        prev, prev_gen = members, r["generation"]
    if cur is not None:
        out.append(cur)
    for h in out:
        h.changes.sort(
            key=lambda c: (c.at_ms, ("leave", "restart", "subscribe", "join").index(c.kind))
        )
    return out


# ---------------------------------------------------------------------------- outcome


@dataclass(slots=True)
class Outcome:
    """What a replay measured (see the module's doc)."""

    rebalances: int = 0
    rebalances_stopping_nobody: int = 0
    partitions_moved: int = 0
    unowned_partition_ms: int = 0
    partitions_unowned: int = 0
    converge_ms: list[int] = field(default_factory=list)
    """Per rebalance that converged: from its start until the group was Stable again."""
    error: str | None = None

    def drop_first_rebalance(self) -> None:
        """The first rebalance only brought the members in (nothing was owned before it)."""
        if self.rebalances:
            self.rebalances -= 1
            self.rebalances_stopping_nobody = max(0, self.rebalances_stopping_nobody - 1)
            if self.converge_ms:
                self.converge_ms.pop(0)

    def add(self, other: Outcome) -> None:
        self.rebalances += other.rebalances
        self.rebalances_stopping_nobody += other.rebalances_stopping_nobody
        self.partitions_moved += other.partitions_moved
        self.unowned_partition_ms += other.unowned_partition_ms
        self.partitions_unowned += other.partitions_unowned
        self.converge_ms += other.converge_ms
        self.error = self.error or other.error


class _Ownership:
    """Who owns which partition, from the members' side; unowned time and moves."""

    def __init__(self, out: Outcome) -> None:
        self.out = out
        self.owned: dict[str, set[TopicPartition]] = {}
        self.released: dict[TopicPartition, tuple[int, str]] = {}
        self.stopped = False
        """A member that stays gave something up since the last rebalance started."""

    def release(
        self, member: str, tps: Iterable[TopicPartition], now: int, *, leaving: bool
    ) -> None:
        mine = self.owned.setdefault(member, set())
        for tp in sorted(tps):
            if tp in mine:
                mine.discard(tp)
                self.released[tp] = (now, member)
                if not leaving:
                    self.stopped = True

    def acquire(self, member: str, tps: Iterable[TopicPartition], now: int, live: set[str]) -> None:
        mine = self.owned.setdefault(member, set())
        for tp in sorted(tps):
            if tp in mine:
                continue
            mine.add(tp)
            rel = self.released.pop(tp, None)
            if rel is None:
                continue
            at, by = rel
            if now > at:
                self.out.unowned_partition_ms += now - at
                self.out.partitions_unowned += 1
            if by != member and by in live:
                self.out.partitions_moved += 1

    def leave(self, member: str, now: int) -> None:
        self.release(member, set(self.owned.get(member, ())), now, leaving=True)
        self.owned.pop(member, None)


class _Loop:
    """Virtual time: actions at their times, the shard's timers at their deadlines."""

    def __init__(self, h: Any, after_step: Callable[[], None]) -> None:
        self.h = h
        self.after_step = after_step
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def at(self, t: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (max(t, self.h.now_ms), next(self._seq), fn))

    def run(self, limit: int = 1_000_000) -> None:
        """Until nothing is left to do. The actions due at one instant run one after the
        other, then ``after_step`` (as the runtime's turn ends: parked joins get their first
        target once the burst is in)."""
        h = self.h
        queue = self._queue
        for _ in range(limit):
            if not queue:
                return
            t = queue[0][0]
            deadline = h.timers.next_deadline()
            if deadline is not None and deadline <= t:
                h.sleep(max(0, deadline - h.now_ms))
                self.after_step()
                continue
            if t > h.now_ms:
                h.sleep(t - h.now_ms)
            while queue and queue[0][0] <= h.now_ms:
                heapq.heappop(queue)[2]()
            self.after_step()
        raise RuntimeError("the replay did not settle")


# ---------------------------------------------------------------------------- KIP-848


@dataclass(eq=False)
class _Member:
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None
    rebalance_timeout_ms: int
    phase: int
    epoch: int = 0
    next_hb: int | None = None
    subscription_sent: bool = False
    parked: int | None = None
    """The token of its join, parked until the group's first target."""


def replay_consumer(history: History, assignor: Any, *, ack_ms: int = 100) -> Outcome:
    """The history as a KIP-848 consumer group (see the module's doc)."""
    from coordinator.core.commands import Pending
    from coordinator.core.config import GroupCoordinatorConfig
    from coordinator.core.errors import CoordinatorError
    from coordinator.harness import Harness

    config = GroupCoordinatorConfig(
        consumer_session_timeout_ms=DAY_MS,
        consumer_max_session_timeout_ms=DAY_MS,
        consumer_assignors=(assignor.name,),
    )
    # Joins to a group before its first target are parked and answered together, as the
    # server does (docs/operations.md, "Big groups and join storms").
    h = Harness(assignors=[assignor], config=config, now_ms=history.start_ms, parks_joins=True)
    ids = {name: h.create_topic(name, n) for name, n in sorted(history.partitions.items())}
    names = {tid: name for name, tid in ids.items()}
    gid = history.group_id
    out = Outcome()
    own = _Ownership(out)
    members: dict[str, _Member] = {}
    interval = config.consumer_heartbeat_interval_ms
    open_bumps: list[int] = []
    state = {"epoch": 0}

    def group() -> Any:
        return h.shard.groups.get(gid)

    def after_step() -> None:
        if h.parked:  # the burst of joins is in: the runtime asks for the first target
            h.run_parked()
        for m in list(members.values()):
            if m.parked is not None and m.parked in h.completions:
                resp = h.completions.pop(m.parked)
                m.parked = None
                answered(m, resp, owned=set())
        g = group()
        epoch = 0 if g is None else g.group_epoch
        if epoch > state["epoch"]:
            open_bumps.append(h.now_ms)
            out.rebalances += 1
            state["epoch"] = epoch
        if open_bumps and (g is None or g.state().value in ("Stable", "Empty")):
            out.converge_ms += [h.now_ms - t for t in open_bumps]
            out.rebalances_stopping_nobody += 0 if own.stopped else len(open_bumps)
            open_bumps.clear()
            own.stopped = False
        elif open_bumps:
            for m in members.values():  # reconciling: everyone heartbeats
                schedule(m, h.now_ms + 1)

    def schedule(m: _Member, t: int, *, ack: bool = False) -> None:
        when = t + ack_ms if ack else t + (m.phase - t) % interval
        if m.next_hb is not None and m.next_hb <= when:
            return
        m.next_hb = when
        loop.at(when, lambda: heartbeat(m, when))

    def heartbeat(m: _Member, when: int) -> None:
        if members.get(m.member_id) is not m or m.next_hb != when:
            return
        m.next_hb = None
        joining = m.epoch == 0
        owned = own.owned.get(m.member_id, set())
        by_topic: dict[str, set[int]] = {}
        for t, p in owned:
            by_topic.setdefault(ids[t], set()).add(p)
        try:
            resp = h.heartbeat(
                group_id=gid,
                member_id=m.member_id,
                member_epoch=m.epoch,
                instance_id=m.instance_id,
                rebalance_timeout_ms=m.rebalance_timeout_ms if joining else -1,
                subscribed_topic_names=None if m.subscription_sent else m.topics,
                topic_partitions={t: frozenset(ps) for t, ps in by_topic.items()},
            )
        except CoordinatorError as e:
            out.error = f"{type(e).__name__}: {e}"
            return
        m.subscription_sent = True
        if isinstance(resp, Pending):
            m.parked = resp.token
            return
        answered(m, resp, owned)

    def answered(m: _Member, resp: Any, owned: set[TopicPartition]) -> None:
        now = h.now_ms
        m.epoch = resp.member_epoch
        changed = False
        if resp.assignment is not None:
            target = {(names[tid], p) for tid, ps in resp.assignment.assigned.items() for p in ps}
            gone = owned - target
            if gone:
                own.release(m.member_id, gone, now, leaving=False)
                changed = True
            new = target - own.owned.get(m.member_id, set())
            if new:
                own.acquire(m.member_id, new, now, set(members))
                changed = True
        if changed:
            schedule(m, now, ack=True)
        elif open_bumps:
            schedule(m, now + 1)

    def apply(c: Change) -> None:
        now = h.now_ms
        if c.kind in ("join", "restart"):
            if c.kind == "restart":
                old = members.pop(c.member, None)
                if old is not None:
                    leave_heartbeat(old, -2 if old.instance_id else -1)
                    own.leave(c.member, now)
            mid = c.successor or c.member
            m = _Member(mid, c.topics, c.instance_id, c.rebalance_timeout_ms, _phase(mid, interval))
            members[mid] = m
            m.next_hb = now
            heartbeat(m, now)
        elif c.kind == "leave":
            gone = members.pop(c.member, None)
            if gone is not None:
                leave_heartbeat(gone, -1)
                own.leave(c.member, now)
        elif c.kind == "subscribe":
            changed = members.get(c.member)
            if changed is not None:
                changed.topics, changed.subscription_sent = c.topics, False
                changed.next_hb = now
                heartbeat(changed, now)
        for each in members.values():
            schedule(each, now + 1)

    def leave_heartbeat(m: _Member, epoch: int) -> None:
        try:
            h.heartbeat(
                group_id=gid, member_id=m.member_id, member_epoch=epoch, instance_id=m.instance_id
            )
        except CoordinatorError:
            pass  # already gone

    loop = _Loop(h, after_step)
    for change in history.changes:
        loop.at(change.at_ms, _bind(apply, change))
    loop.run()
    out.rebalances_stopping_nobody += 0 if own.stopped else len(open_bumps)
    if not history.counts_start:
        out.drop_first_rebalance()
    return out


# ---------------------------------------------------------------------------- cooperative classic


@dataclass(eq=False)
class _ClassicMember:
    key: str
    """The history's member id (the replay's coordinator hands out its own)."""
    topics: tuple[str, ...]
    instance_id: str | None
    rebalance_timeout_ms: int
    phase: int
    member_id: str = ""
    generation: int = -1
    joining: Any = None
    syncing: Any = None
    next_hb: int | None = None


def replay_cooperative(history: History, *, heartbeat_ms: int = 3_000) -> Outcome:
    """The history as a classic group of cooperative-sticky members (see the module's doc)."""
    from coordinator.core import records as r
    from coordinator.core.config import GroupCoordinatorConfig
    from coordinator.core.errors import CoordinatorError
    from coordinator.harness import Harness, subscription
    from legacy_bridge import messages as lm
    from legacy_bridge.protocol import AssignmentMessage, decode_assignment, encode_assignment

    from .clients import COOPERATIVE_STICKY, cooperative_sticky_assignment

    config = GroupCoordinatorConfig(classic_max_session_timeout_ms=DAY_MS)
    h = Harness(config=config, now_ms=history.start_ms)
    for name, n in sorted(history.partitions.items()):
        h.create_topic(name, n)
    gid = history.group_id
    out = Outcome()
    own = _Ownership(out)
    members: dict[str, _ClassicMember] = {}
    seen = {"log": 0, "generation": 0}

    def protocols(m: _ClassicMember) -> tuple[tuple[str, bytes], ...]:
        owned: dict[str, list[int]] = {}
        for t, p in sorted(own.owned.get(m.key, ())):
            owned.setdefault(t, []).append(p)
        sub = subscription(m.topics, owned=owned, generation_id=m.generation)
        return ((COOPERATIVE_STICKY, sub),)

    def after_step() -> None:
        for rec in h.log[seen["log"] :]:
            v = rec.value
            if isinstance(v, r.GroupMetadataValue) and v.generation > seen["generation"]:
                seen["generation"] = v.generation
                out.rebalances += 1
                start = v.rebalance.preparing_ms if v.rebalance is not None else h.now_ms
                out.converge_ms.append(h.now_ms - start)
                out.rebalances_stopping_nobody += 0 if own.stopped else 1
                own.stopped = False
        seen["log"] = len(h.log)
        # One member's request may answer another's waiting one: until nobody moves on.
        for _ in range(1_000):
            if not any(progress(m) for m in list(members.values())):
                return
        raise RuntimeError("classic members keep answering each other")

    def progress(m: _ClassicMember) -> bool:
        """Handles the answer to its waiting JoinGroup or SyncGroup, if it came."""
        moved = False
        if m.joining is not None:
            resp = h.resolve(m.joining)
            if resp is None:
                return False
            m.joining = None
            joined(m, resp)
            moved = True
        if m.syncing is not None:
            resp = h.resolve(m.syncing)
            if resp is None:
                return moved
            m.syncing = None
            synced(m, resp)
            moved = True
        return moved

    def join(m: _ClassicMember) -> None:
        if members.get(m.key) is not m or m.joining is not None or m.syncing is not None:
            return
        try:
            resp = h.join_group(
                m.member_id,
                m.topics,
                group_id=gid,
                session_timeout_ms=DAY_MS,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                instance_id=m.instance_id,
                protocols=protocols(m),
                client_id=m.key,
            )
        except CoordinatorError as e:
            out.error = f"{type(e).__name__}: {e}"
            return
        m.joining = resp
        progress(m)

    def joined(m: _ClassicMember, resp: Any) -> None:
        if resp.error_code == 79:  # MEMBER_ID_REQUIRED
            m.member_id = resp.member_id
            join(m)
            return
        if resp.error_code:
            loop.at(h.now_ms + 100, lambda: join(m))
            return
        m.member_id, m.generation = resp.member_id, resp.generation_id
        assignments: dict[str, bytes] = {}
        if resp.leader == m.member_id and resp.members and not resp.skip_assignment:
            assignments = leader_assignment(resp.members)
        try:
            m.syncing = h.sync_group(
                m.member_id, m.generation, assignments, group_id=gid, instance_id=m.instance_id
            )
        except CoordinatorError:  # the group started over: rejoin
            join(m)
            return
        progress(m)

    def leader_assignment(joined_members: Any) -> dict[str, bytes]:
        from legacy_bridge.protocol import decode_subscription

        subs = {x.member_id: decode_subscription(x.metadata) for x in joined_members}
        a = cooperative_sticky_assignment(
            {
                mid: (s.topics, {t: frozenset(ps) for t, ps in s.owned_partitions})
                for mid, s in subs.items()
            },
            history.partitions,
        )
        return {
            mid: encode_assignment(
                AssignmentMessage(
                    assigned_partitions=tuple(
                        (t, tuple(ps)) for t, ps in sorted(a[mid].items()) if ps
                    )
                )
            )
            for mid in a
        }

    def synced(m: _ClassicMember, resp: Any) -> None:
        if resp.error_code:
            join(m)
            return
        got = decode_assignment(resp.assignment) if resp.assignment else AssignmentMessage()
        target = {(t, p) for t, ps in got.assigned_partitions for p in ps}
        gone = own.owned.get(m.key, set()) - target
        now = h.now_ms
        own.release(m.key, gone, now, leaving=False)
        own.acquire(m.key, target, now, set(members))
        if gone:
            join(m)  # KIP-429: rejoin so that what it gave up can be assigned
        else:
            schedule(m, now + 1)

    def schedule(m: _ClassicMember, t: int) -> None:
        when = t + (m.phase - t) % heartbeat_ms
        if m.next_hb is not None and m.next_hb <= when:
            return
        m.next_hb = when
        loop.at(when, lambda: heartbeat(m, when))

    def heartbeat(m: _ClassicMember, when: int) -> None:
        if members.get(m.key) is not m or m.next_hb != when:
            return
        m.next_hb = None
        if m.joining is not None or m.syncing is not None or m.generation < 0:
            return
        try:
            code = h.classic_heartbeat(
                m.member_id, m.generation, group_id=gid, instance_id=m.instance_id
            ).error_code
        except CoordinatorError as e:
            code = int(e.code)
        if code in (22, 27):  # ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS
            join(m)
        elif not stable():
            schedule(m, h.now_ms + 1)

    def stable() -> bool:
        g = h.shard.classic_groups.get(gid)
        return g is None or g.state.value in ("Stable", "Empty")

    def apply(c: Change) -> None:
        now = h.now_ms
        if c.kind in ("leave", "restart"):
            old = members.pop(c.member, None)
            if old is not None:
                own.leave(c.member, now)
                if c.kind == "leave" and old.member_id:
                    # A static member is removed by its instance id (KIP-345): it sends no
                    # LeaveGroup of its own, and the replay's sessions never expire.
                    with contextlib.suppress(CoordinatorError):  # already removed
                        h.leave_group(
                            lm.LeaveMember(
                                member_id=old.member_id, group_instance_id=old.instance_id
                            ),
                            group_id=gid,
                        )
        if c.kind in ("join", "restart"):
            key = c.successor or c.member
            m = _ClassicMember(
                key, c.topics, c.instance_id, c.rebalance_timeout_ms, _phase(key, heartbeat_ms)
            )
            members[key] = m
            join(m)
        elif c.kind == "subscribe":
            changed = members.get(c.member)
            if changed is not None:
                changed.topics = c.topics
                join(changed)
        for each in members.values():
            schedule(each, now + 1)

    loop = _Loop(h, after_step)
    for change in history.changes:
        loop.at(change.at_ms, _bind(apply, change))
    loop.run()
    if not history.counts_start:
        out.drop_first_rebalance()
    return out


def _bind(fn: Callable[[Change], None], change: Change) -> Callable[[], None]:
    return lambda: fn(change)


def _phase(member: str, interval_ms: int) -> int:
    """A member's heartbeat phase: its own, independent of the others' (a history's times are
    often round numbers; real clients' heartbeats are not in step)."""
    return zlib.crc32(member.encode()) % interval_ms
