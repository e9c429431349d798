"""Real Kafka clients through the Kafka listener, against Tansu's own group coordinator.

    .venv/bin/python bench/kafka_clients.py            # full run, writes docs/benchmarks.md
    .venv/bin/python bench/kafka_clients.py --quick    # one run of each, no doc
    .venv/bin/python bench/kafka_clients.py --only assignment|restart

1. Time from a consumer's start to its first assignment, for kafka-python and aiokafka (their
   default settings; librdkafka's rows are bench/kafka.py's): through the listener in front of
   Tansu (the classic bridge) and straight to Tansu (its own classic coordinator).
2. A rolling restart under load: a group of four consumers on a 6-partition topic while a
   producer writes 200 records/s; each member in turn is stopped gracefully and started again
   at once (the next one when the group is stable again, every member owning a partition).
   From the consumers' own rebalance callbacks (tests/e2e/kafka_clients.py): partition-seconds
   without an owner over the whole restart, the longest time one partition had none, and the
   wall time of the restart. librdkafka classic (eager ``range`` and ``cooperative-sticky``) and
   KIP-848 (``group.protocol=consumer``) through the listener; the classic ones also straight to
   Tansu. An online upgrade (each classic member restarted as KIP-848) is one more row.

Every consumer is a process of its own (librdkafka, kafka-python or aiokafka); the coordinator,
Tansu and the clients share the machine's cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # the real-client harness and the Tansu fixture

from kafka_clients import STACK_SETTINGS, BackgroundProducer, Consumer, Fleet  # noqa: E402
from kafka_support import KafkaStack, create_topics  # noqa: E402

from bench._report import machine, table, write_section  # noqa: E402

PARTITIONS = 6
MEMBERS = ("m1", "m2", "m3", "m4")
SETTLE_S = 120.0


# ---------------------------------------------------------------- 1. time to first assignment


def first_assignment(fleet: Fleet, kind: str, group: str, topic: str) -> float:
    """Seconds from starting a consumer process (its client's default group settings) to its
    first assign callback with partitions; the process's own start-up (imports) excluded."""
    consumer: Consumer = fleet.start(
        "first", kind, group, topics=[topic], session_timeout_ms=None, heartbeat_interval_ms=None
    )
    [started] = consumer.events("started")
    fleet.wait_for(
        lambda: any(e["partitions"] for e in consumer.events("assign")), SETTLE_S, "assignment"
    )
    [first] = [e for e in consumer.events("assign") if e["partitions"]][:1]
    consumer.stop()
    return float(first["t"] - started["t"])


def bench_assignment(repeat: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kip848-bench-clients-") as tmp:
        stack = KafkaStack(Path(tmp), "--set", "kafka.upstream.metadata.max.age.ms=1000")
        try:
            c = stack.server.client()
            create_topics(c, assign=PARTITIONS)
            c.close()
            for kind in ("kafka-python", "aiokafka"):
                for where, address in (
                    ("listener (the classic bridge)", stack.server.kafka_address),
                    ("Tansu's own coordinator", stack.tansu.address),
                ):
                    fleet = Fleet(address, Path(tmp))
                    try:
                        times = [
                            first_assignment(fleet, kind, f"assign-{time.monotonic_ns()}", "assign")
                            for _ in range(repeat)
                        ]
                    finally:
                        fleet.close()
                    rows.append({"case": f"{kind}, {where}", "times": times})
                    print(rows[-1]["case"], ", ".join(f"{t:.2f} s" for t in times), flush=True)
        finally:
            stack.stop()
    return rows


# ---------------------------------------------------------------- 2. rolling restart


def rolling_restart(
    address: str,
    log_dir: Path,
    topic: str,
    before: tuple[str, str | None],
    after: tuple[str, str | None],
) -> dict[str, float]:
    """Four members of kind/assignor ``before``, each restarted as ``after``, under load."""
    group = f"restart-{time.monotonic_ns()}"
    partitions = {(topic, p) for p in range(PARTITIONS)}
    fleet = Fleet(address, log_dir)
    producer = None
    try:
        for name in MEMBERS:
            fleet.start(name, before[0], group, topics=[topic], assignor=before[1])
        fleet.wait_for_assignment(partitions, SETTLE_S, names=MEMBERS)
        producer = BackgroundProducer(address, topic, PARTITIONS, 200, group)
        began = time.monotonic()
        for name in MEMBERS:
            (old,) = [c for c in fleet.live() if c.name == name]
            old.stop()
            fleet.start(name, after[0], group, topics=[topic], assignor=after[1])
            fleet.wait_for_assignment(partitions, SETTLE_S, names=MEMBERS)
        ended = time.monotonic()
        written = producer.stop()
        producer = None
        fleet.wait_consumed(written, SETTLE_S)
        fleet.check_exclusive_ownership()
        total, longest = fleet.unowned(group, partitions, began, ended)
        fleet.stop_all()
        return {"unowned": total, "longest": longest, "wall": ended - began}
    finally:
        if producer is not None:
            producer.stop()
        fleet.close()


RESTARTS = [
    # (name, through the listener?, before, after)
    ("librdkafka classic eager (range)", True, ("librdkafka-classic", "range"), None),
    ("librdkafka classic eager (range)", False, ("librdkafka-classic", "range"), None),
    (
        "librdkafka classic cooperative-sticky",
        True,
        ("librdkafka-classic", "cooperative-sticky"),
        None,
    ),
    (
        "librdkafka classic cooperative-sticky",
        False,
        ("librdkafka-classic", "cooperative-sticky"),
        None,
    ),
    ("librdkafka KIP-848 (group.protocol=consumer)", True, ("librdkafka-consumer", None), None),
    (
        "online upgrade: classic cooperative-sticky -> KIP-848",
        True,
        ("librdkafka-classic", "cooperative-sticky"),
        ("librdkafka-consumer", None),
    ),
]


def bench_restart(repeat: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kip848-bench-restart-") as tmp:
        stack = KafkaStack(Path(tmp), *STACK_SETTINGS)
        try:
            c = stack.server.client()
            create_topics(c, restart=PARTITIONS)
            c.close()
            for name, listener, before, after in RESTARTS:
                address = stack.server.kafka_address if listener else stack.tansu.address
                runs = [
                    rolling_restart(address, Path(tmp), "restart", before, after or before)
                    for _ in range(repeat)
                ]
                where = "listener" if listener else "Tansu's own coordinator"
                rows.append({"case": name, "where": where, "runs": runs})
                print(name, where, runs, flush=True)
        finally:
            stack.stop()
    return rows


# ---------------------------------------------------------------- main


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one run of each, no doc")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("assignment", "restart"), default=None)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat
    parts = [args.only] if args.only else ["assignment", "restart"]
    assignment = bench_assignment(repeat) if "assignment" in parts else []
    restart = bench_restart(repeat) if "restart" in parts else []
    body = [
        "## Real Kafka clients (`python bench/kafka_clients.py`)",
        "",
        f"{machine()}. Coordinator, Tansu, producer and every consumer (a process each) share "
        "the 2 cores, on a machine shared with other work while measured: treat the figures as "
        "rough.",
    ]
    if assignment:
        body += [
            "",
            "### Time to first assignment: kafka-python and aiokafka",
            "",
            "One consumer, the only member of a new group, subscribed to a 6-partition topic, "
            "every group setting at its client's default (kafka-python and aiokafka: "
            "`session.timeout.ms` 10 s); from the consumer process's start (after its imports) "
            'to its first assign callback. librdkafka\'s rows: section "Kafka listener".',
            "",
            table(
                ("consumer", "runs", "median s", "all runs s"),
                [
                    (
                        r["case"],
                        len(r["times"]),
                        f"{_median(r['times']):.2f}",
                        ", ".join(f"{t:.2f}" for t in r["times"]),
                    )
                    for r in assignment
                ],
            ),
            "",
            "Through the listener a new classic group waits `group.initial.rebalance.delay.ms` "
            "(3 s, Kafka's default) for more members; Tansu's coordinator holds the JoinGroup "
            "for about half the session timeout.",
        ]
    if restart:
        body += [
            "",
            "### Rolling restart under load, from the clients' callbacks",
            "",
            "Four consumers (librdkafka), 6 partitions, a producer writing 200 records/s; each "
            "member in turn stopped gracefully and started again at once, the next one once "
            "every member owns a partition again. A partition has an owner from a member's "
            "assign callback until its revoke callback returned (or it stopped processing). "
            "Classic members use `session.timeout.ms` 6 s and `heartbeat.interval.ms` 0.5 s; "
            "the coordinator gives KIP-848 members a 0.5 s heartbeat interval and waits 0.5 s "
            "before a new classic group's first rebalance (`kip848 serve` settings as in the "
            "real-client tests). Every run: each record consumed, no partition owned twice.",
            "",
            table(
                (
                    "fleet",
                    "coordinator",
                    "runs",
                    "partition-s without owner (median)",
                    "longest gap s (median)",
                    "restart wall s (median)",
                ),
                [
                    (
                        r["case"],
                        r["where"],
                        len(r["runs"]),
                        f"{_median([x['unowned'] for x in r['runs']]):.1f}",
                        f"{_median([x['longest'] for x in r['runs']]):.2f}",
                        f"{_median([x['wall'] for x in r['runs']]):.1f}",
                    )
                    for r in restart
                ],
            ),
        ]
    text = "\n".join(body) + "\n"
    print(text)
    if not args.no_doc and not args.quick and not args.only:
        write_section("kafka-clients", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
