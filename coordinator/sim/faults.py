"""The simulation's faults: their names, and the client and cluster faults a simulation
injects (network faults — lost, duplicated, delayed, reordered messages — are decided where a
message is sent, in ``Simulation``).

Every choice draws from the simulation's one ``random.Random``, in the same order as before
the faults lived here: a seed replays exactly. ``FaultInjector`` works on the simulation it is
given (its clients, harness, store, replica, event queue and trace); the simulation calls
``schedule_one`` after a step, and its ``fault`` and ``recreate`` events call ``apply`` and
``recreate_topic``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.core import codec
from coordinator.core.errors import IllegalStateError
from coordinator.core.timers import TimerTable

from . import invariants as inv
from .classic_client import COOPERATIVE, EAGER, SYNCING, ClassicClient
from .client import JOINING, LEAVING, MEMBER
from .report import diff

if TYPE_CHECKING:
    from .simulator import Simulation

ALL_FAULTS = (
    "lose-request",
    "lose-response",
    "duplicate",
    "delay",
    "crash",
    "static-bounce",
    "leave",
    "slow-revoke",
    "add-partitions",
    "recreate-topic",
    "assignor",
    "coordinator-restart",
    "switch-protocol",
    "stale-commit",
)
CLASSIC_ONLY_FAULTS = ("switch-protocol",)  # injected only when the fleet uses the classic protocol
EXTRA_FAULTS = ("reorder",)
KNOWN_FAULTS = ALL_FAULTS + EXTRA_FAULTS


def parse_faults(text: str | Sequence[str] | None) -> frozenset[str]:
    if text is None:
        return frozenset(ALL_FAULTS)
    items = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    out: set[str] = set()
    for item in items:
        if item == "all":
            out |= set(ALL_FAULTS)
        elif item == "none":
            continue
        elif item in KNOWN_FAULTS:
            out.add(item)
        else:
            raise ValueError(
                f"unknown fault {item!r} (known: {', '.join(KNOWN_FAULTS)}, all, none)"
            )
    return frozenset(out)


class FaultInjector:
    """The client and cluster faults of one simulation."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def schedule_one(self) -> None:
        """Maybe called after each step while faults are on: schedules one client or cluster
        fault of an enabled kind, at a random time within a heartbeat interval."""
        sim = self.sim
        p = sim.p
        kinds = [
            f
            for f in (
                "crash",
                "static-bounce",
                "leave",
                "add-partitions",
                "recreate-topic",
                "assignor",
                "coordinator-restart",
                "switch-protocol",
            )
            if f in p.faults
        ]
        if not p.uses_classic():
            kinds = [f for f in kinds if f not in CLASSIC_ONLY_FAULTS]
        if not kinds:
            return
        kind = sim.rng.choice(kinds)
        sim._schedule(sim.now + sim.rng.randint(0, p.heartbeat_interval_ms), "fault", (kind,))

    def apply(self, kind: str) -> None:
        """A scheduled fault happens (the ``fault`` event)."""
        sim = self.sim
        if not sim.faults_on:
            sim._log(f"fault {kind} dropped (faults stopped)")
            return
        rng = sim.rng
        up = [
            c
            for c in sim.clients
            if c.phase in (JOINING, SYNCING, MEMBER) and c.index not in sim.switch_to
        ]
        if kind in ("crash", "leave", "static-bounce", "assignor", "switch-protocol"):
            pool = [c for c in up if c.instance_id is not None] if kind == "static-bounce" else up
            if kind == "leave":
                pool = [c for c in up if c.instance_id is None]
            if kind == "assignor":
                pool = [c for c in up if not isinstance(c, ClassicClient)]
            if not pool:
                return
            c = rng.choice(pool)
            sim.summary.faults[kind] += 1
            if kind == "switch-protocol":
                if isinstance(c, ClassicClient):
                    new = sim._new_client(c.index, classic=False, incarnation=c.incarnation)
                else:
                    protocol = (
                        sim.p.protocol
                        if sim.p.protocol != "mixed"
                        else rng.choice((EAGER, COOPERATIVE))
                    )
                    new = sim._new_client(
                        c.index, classic=True, protocol=protocol, incarnation=c.incarnation
                    )
                sim.switch_to[c.index] = new
                c.begin_leave(static_bounce=c.instance_id is not None)
                sim._log(
                    f"fault: c{c.index} shuts down to restart as a "
                    f"{'classic/' + new.protocol if isinstance(new, ClassicClient) else 'KIP-848'} client"
                )
                sim._send(c.index)
                sim._schedule(
                    sim.now + rng.randint(1, sim.p.restart_delay_max_ms), "start", (c.index,)
                )
                return
            if kind == "assignor":
                name = rng.choice(sim.assignor_names)
                sim._log(f"fault: c{c.index} switches its server assignor to {name}")
                sim._after(c.index, c.set_assignor(name))
                return
            if kind == "crash":
                c.crash()
                sim._log(f"fault: c{c.index} crashes")
            else:
                c.begin_leave(static_bounce=(kind == "static-bounce"))
                how = (
                    ("LeaveGroup" if c.phase == LEAVING else "no LeaveGroup")
                    if isinstance(c, ClassicClient)
                    else ("-2" if c.leave_epoch == -2 else "-1")
                )
                sim._log(f"fault: c{c.index} shuts down ({how})")
                sim._send(c.index)
            sim._schedule(sim.now + rng.randint(1, sim.p.restart_delay_max_ms), "start", (c.index,))
            return
        sim.summary.faults[kind] += 1
        if kind == "add-partitions":
            live = [n for n in sim.topic_names if n not in sim.deleted]
            if not live:
                return
            name = rng.choice(live)
            total = sim.h.registry.topics[name].num_partitions + rng.randint(1, 2)
            sim.h.add_partitions(name, total)
            sim.replica.set_topics(sim.h.registry.image())
            sim._log(f"fault: topic {name} grows to {total} partitions")
        elif kind == "recreate-topic":
            live = [n for n in sim.topic_names if n not in sim.deleted]
            if not live:
                return
            name = rng.choice(live)
            res = sim.h.delete_topic(name)
            sim._store_records(res.records)  # offsets of the topic go with it
            sim.h.completions.clear()
            sim._route_completions(res.completions)
            sim.deleted.add(name)
            sim.replica.set_topics(sim.h.registry.image())
            sim._log(f"fault: topic {name} deleted")
            sim._schedule(sim.now + rng.randint(1, sim.p.restart_delay_max_ms), "recreate", (name,))
        elif kind == "coordinator-restart":
            self.restart_coordinator()

    def recreate_topic(self, name: str) -> None:
        """The topic deleted by ``recreate-topic`` comes back (the ``recreate`` event)."""
        sim = self.sim
        sim.deleted.discard(name)
        sim._create_topic(name, sim.p.partitions)
        sim._log(f"topic {name} re-created with {sim.p.partitions} partitions")

    def restart_coordinator(self) -> None:
        """Reload from the store through the codec; everything in flight is lost."""
        sim = self.sim
        before = sim.h.shard.snapshot()
        old = sim.group
        if old is not None and old.waiting:  # soft state: the callers are gone
            sim.summary.events["parked-join-dropped-by-restart"] += sum(
                len(tokens) for tokens in old.waiting.values()
            )
        fresh = sim._fresh_shard()
        fresh.undo.enabled = False
        try:
            for k, v in sim.store:
                fresh.replay(codec.decode(k, v))
        except IllegalStateError as exc:
            sim._fail(inv.REPLAY_EQUALS_LIVE, f"reloading the store failed: {exc}")
        fresh.undo.enabled = True
        sim.h.shard = fresh
        sim.h.timers = TimerTable()
        sim.h.timers.apply(fresh.on_loaded(sim.now))
        sim.coord_gen += 1
        sim.assigning.clear()  # offloaded computations die with the process
        sim.parked.clear()  # parked JoinGroup/SyncGroup requests and joins die with the process
        sim.answered.clear()  # the fresh shard draws its tokens anew
        sim.first_targets.clear()
        sim.joins_arrived.clear()
        for (
            c
        ) in sim.clients:  # a generation not yet written is forgotten by the reloaded coordinator
            if isinstance(c, ClassicClient):
                c.fresh_generation = False
        sim.fifo.clear()
        sim.resp_fifo.clear()
        sim.summary.restarts += 1
        sim._log(f"fault: coordinator restarts; reloaded {len(sim.store)} records")
        after = fresh.snapshot()
        if after != before:
            sim._fail(
                inv.REPLAY_EQUALS_LIVE,
                "state reloaded from the store differs from the state "
                "before the restart:\n" + diff(before, after),
            )
