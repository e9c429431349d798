"""One worker of the work-distribution demo: a kip848.client member that processes its units.

A unit of work is a partition of the topic ``units``. While it owns a unit, the worker advances
the unit's position every tick and stores it; auto-commit saves the positions (every second,
and when a unit is revoked, before the hand-off is acknowledged), so the next owner of a unit
resumes where this one stopped. Every change is reported on stdout as one JSON line for the
dashboard (``demo.py``). SIGTERM or SIGINT: leave the group gracefully and exit.

    python worker.py --target 127.0.0.1:9094 --name w1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

from kip848.client import GroupMember, TopicPartition, tls_credentials, token_file


def report(**fields: object) -> None:
    print(json.dumps({"t": time.monotonic(), **fields}), flush=True)


async def run(args: argparse.Namespace) -> None:
    positions: dict[TopicPartition, int] = {}
    member: GroupMember

    async def on_assigned(units: frozenset[TopicPartition]) -> None:
        positions.update(await member.committed(units))  # resume where the last owner stopped
        for unit in units:
            positions[unit] = max(positions[unit], 0)
        report(worker=args.name, event="assigned", units=sorted(u.partition for u in units))

    async def on_revoked(units: frozenset[TopicPartition]) -> None:
        for unit in units:
            member.store_offsets({unit: positions.pop(unit)})  # committed before the hand-off
        report(worker=args.name, event="revoked", units=sorted(u.partition for u in units))

    async def on_lost(units: frozenset[TopicPartition]) -> None:
        for unit in units:
            positions.pop(unit, None)  # someone else may own it already: do not commit
        report(worker=args.name, event="lost", units=sorted(u.partition for u in units))

    member = GroupMember(
        args.target,
        args.group,
        topics=[args.topic],
        client_id=f"worker-{args.name}",
        on_assigned=on_assigned,
        on_revoked=on_revoked,
        on_lost=on_lost,
        enable_auto_commit=True,
        auto_commit_interval_ms=1_000,
        # A secured coordinator (docs/security.md): TLS, and a bearer token re-read from a file.
        credentials=tls_credentials(args.tls_ca, args.tls_cert, args.tls_key)
        if args.tls_ca or args.tls_cert
        else None,
        token=token_file(args.token_file) if args.token_file else None,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await member.start()
    report(worker=args.name, event="started", member_id=member.member_id)
    while not stop.is_set():
        for unit in list(positions):
            positions[unit] += 1  # "process" one item of the unit
        member.store_offsets(positions)
        report(
            worker=args.name,
            event="progress",
            positions={u.partition: o for u, o in positions.items()},
        )
        try:
            await asyncio.wait_for(stop.wait(), args.tick_ms / 1000)
        except TimeoutError:
            pass
    await member.close()
    report(worker=args.name, event="stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the coordinator, host:port")
    parser.add_argument("--name", required=True)
    parser.add_argument("--group", default="work-distribution")
    parser.add_argument("--topic", default="units")
    parser.add_argument("--tick-ms", type=int, default=200)
    parser.add_argument("--tls-ca", help="TLS: the CAs the coordinator's certificate chains to")
    parser.add_argument("--tls-cert", help="mutual TLS: this worker's certificate (PEM)")
    parser.add_argument("--tls-key", help="mutual TLS: its key, if not in --tls-cert")
    parser.add_argument("--token-file", help="a bearer JWT, sent with every call")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
