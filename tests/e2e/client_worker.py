"""A process hosting some kip848.client members, for the e2e tests (so members can be killed).

    python tests/e2e/client_worker.py TARGET GROUP TOPIC NAME [NAME...] [--push|--no-push]

Commands on stdin, one per line: ``stop NAME`` (close: revoke, leave), ``start NAME`` (a new
incarnation with a new member id), ``quit`` (close all, exit 0). Events on stdout, one JSON
object per line, flushed at once: ``{"t": monotonic seconds, "name", "member_id", "event",
"partitions": [[topic_id, partition], ...]}`` with event in started, assigned (t = when
on_assigned was invoked: the member owns them from then), revoked (t = when on_revoked
returned: it owned them until then), lost (t = when on_lost was invoked), stopped, failed.
``time.monotonic`` is the same clock in every process of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kip848.client import GroupMember, TopicPartition


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps({"t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


def listing(partitions: frozenset[TopicPartition]) -> list[list[object]]:
    return sorted([tp.topic_id, tp.partition] for tp in partitions)


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.members: dict[str, GroupMember] = {}

    def make(self, name: str) -> GroupMember:
        holder: dict[str, GroupMember] = {}

        def record(event: str):
            async def callback(partitions: frozenset[TopicPartition]) -> None:
                emit(
                    name=name,
                    member_id=holder["m"].member_id,
                    event=event,
                    partitions=listing(partitions),
                )

            return callback

        member = GroupMember(
            self.args.target,
            self.args.group,
            topics=[self.args.topic],
            client_id=f"worker-{name}",
            on_assigned=record("assigned"),
            on_revoked=record("revoked"),
            on_lost=record("lost"),
            rebalance_timeout_ms=self.args.rebalance_timeout_ms,
            request_timeout_ms=self.args.request_timeout_ms,
            **({"push": self.args.push} if self.args.push is not None else {}),
        )
        holder["m"] = member
        return member

    async def start(self, name: str) -> None:
        member = self.make(name)
        self.members[name] = member
        await member.start()
        emit(name=name, member_id=member.member_id, event="started", partitions=[])

    async def stop(self, name: str) -> None:
        member = self.members.pop(name)
        await member.close()
        emit(name=name, member_id=member.member_id, event="stopped", partitions=[])

    async def run(self) -> None:
        for name in self.args.names:
            await self.start(name)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = (await reader.readline()).decode().strip()
            if not line or line == "quit":
                break
            verb, name = line.split()
            await (self.start(name) if verb == "start" else self.stop(name))
        await asyncio.gather(*(self.stop(n) for n in list(self.members)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("names", nargs="+")
    parser.add_argument("--push", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=30_000)
    parser.add_argument("--request-timeout-ms", type=int, default=5_000)
    asyncio.run(Worker(parser.parse_args()).run())


if __name__ == "__main__":
    main()
