"""The simulation's faults: their names, and the client and cluster faults a simulation
injects. Network faults — lost, duplicated, delayed, reordered messages — are decided where a
message is sent (``Simulation``); the store's and the workers' — a failed append, a slow fsync,
a late outcome — where the coordinator writes or computes (``coordinator.py``).

Every choice draws from the simulation's one ``random.Random``: a seed replays exactly.
``FaultInjector`` works on the simulation it is given (its clients, coordinator, event queue
and trace); the simulation calls ``schedule_one`` after a step, and its ``fault`` and
``recreate`` events call ``apply`` and ``recreate_topic``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.core.errors import ErrorCode

from . import invariants as inv
from .classic_client import COOPERATIVE, EAGER, SYNCING, ClassicClient
from .client import JOINING, LEAVING, MEMBER

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
    "store-fail",
    "slow-fsync",
    "late-offload",
    "busy-loop",
)
STORE_FAULTS = ("store-fail", "slow-fsync", "late-offload")
"""Decided per batch (per job) where the coordinator writes (computes), at their own rate."""
CLASSIC_ONLY_FAULTS = ("switch-protocol",)  # injected only when the fleet uses the classic protocol
EXTRA_FAULTS = ("reorder", "partition-move")
"""Not in ``all``: ``reorder`` (finding F1); ``partition-move`` (``moves.py``: it draws from a
stream of its own, so a seed's other faults fall where they did until the first move, but the
seeds the CI set pins for what they meet after it would meet something else)."""
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

    def __init__(self, sim: Any) -> None:
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
                "busy-loop",
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
            live = [n for n in sim.topic_names if n in sim.coord.registry.topics]
            if not live:
                return
            name = rng.choice(live)
            total = sim.coord.registry.topics[name].num_partitions + rng.randint(1, 2)
            sim.coord.topics(lambda r: r.create_partitions([(name, total)]), done=_written)
            sim._log(f"fault: topic {name} grows to {total} partitions")
        elif kind == "recreate-topic":
            live = [n for n in sim.topic_names if n in sim.coord.registry.topics]
            if not live:
                return
            name = rng.choice(live)
            delay = rng.randint(1, sim.p.restart_delay_max_ms)

            def deleted(error: BaseException | None) -> None:
                if error is not None:
                    sim._log(f"the deletion of topic {name} was not written")
                    return
                sim.deleted.add(name)
                sim._schedule(sim.now + delay, "recreate", (name,))

            sim.coord.topics(
                lambda r: r.delete_topics([name]),
                deleted=lambda results: [t.name for t in results if t.error_code == ErrorCode.NONE],
                done=deleted,
            )  # offsets of the topic go with it, in the same batch
            sim._log(f"fault: topic {name} deleted")
        elif kind == "busy-loop":
            if sim.busy_until:
                return
            sim.busy_until = sim.now + rng.randint(1, sim.p.busy_max_ms)
            sim._schedule(sim.busy_until, "resume", ())
            sim._log(f"fault: the coordinator's loop is busy until t={sim.busy_until}")
        elif kind == "coordinator-restart":
            # A generation not yet written is forgotten by the reload (the replica: every
            # durable record).
            forgotten = [
                member
                for g in sim.groups
                for member in inv.note_restart(
                    sim.coord.replica_of(g.gid), g.gid, sim.clients_of(g)
                )
            ]
            if forgotten:
                sim.summary.events["generation-forgotten-by-restart"] += len(forgotten)
                sim._log(f"  generations never written, forgotten: {', '.join(forgotten)}")
            sim.fifo.clear()
            sim.resp_fifo.clear()
            sim.busy_until, sim.postponed = 0, []  # its requests die with the process
            sim.duplicated, sim.copies_due, sim.behind_copies = set(), set(), []
            sim.summary.restarts += 1
            sim.coord.restart()

    def recreate_topic(self, name: str) -> None:
        """The topic deleted by ``recreate-topic`` comes back (the ``recreate`` event)."""
        sim = self.sim
        sim.deleted.discard(name)
        sim.create_topic(name, sim.p.partitions)
        sim._log(f"topic {name} re-created with {sim.p.partitions} partitions")


def _written(error: BaseException | None) -> None:
    """A topic change whose write failed was rolled back: it did not happen."""
