"""What a change to the topic registry costs the event loop as the registry grows
(docs/benchmarks.md "A topic change in a large registry").

    .venv/bin/python bench/topics_image.py                  # 1k, 10k, 100k topics; doc
    .venv/bin/python bench/topics_image.py --topics 10000 --repeat 1 --no-doc

Each run is a fresh process on a server's event loop (uvloop, the loop's garbage collector:
coordinator/server/loop.py) whose store (the memory store) holds ``--topics`` topics:

* *create*: a node loads it, then ``CREATES`` topics are created one request at a time
  (``CoordinatorRuntime.create_topics``, each answered once durable); after each, the
  committed copy's image is read, as a group's read during a write of the cluster log reads it
  (``reads.py``). Per creation: the loop thread's CPU time (median and most), and the longest
  stall of a callback due every millisecond over all of them (wall / the loop thread's CPU
  from one tick to the next).
* *catch-up*: a second node sharing the store (``share_partitions``) follows ``FOLLOWED``
  topics another writer created, from the journal (within retention:
  ``Partitions._apply_cluster_entries``), then reads its committed copy's image: the loop's
  longest stall while it catches up.

*before*: the topics' image built whole from every topic after a change, as it was;
*after*: the image built from the previous one and the topics changed
(``topics.image_changed``), its mappings layered over the last ones
(``model.mapping_changed``). The two modes alternate; each run's images are checked equal to
images built whole.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from bench._report import (  # noqa: E402
    alternate,
    command,
    machine,
    print_child_result,
    table,
    write_section,
)

TARGET_MS = 1.0
"""What the loop may spend on one topic created (its image and the committed copy's
included; the median), whatever the number of topics."""
MODES = ("before", "after")
CREATES = 400
"""More than a layered image's overlay holds at 100,000 topics (64 + 316): the runs include
the copies that make its mappings plain dicts again."""
FOLLOWED = 100


def _as_it_was() -> None:
    """*before*: ``TopicRegistry.image`` builds the image whole from every topic."""
    from coordinator.core.model import TopicImage, TopicsImage
    from coordinator.core.topics import TopicRegistry

    def image(self: Any) -> TopicsImage:
        if self._stale:
            self._version += 1
            self._image = TopicsImage.of(
                (
                    TopicImage(v.topic_id, name, v.num_partitions, v.partition_racks)
                    for name, v in self.topics.items()
                ),
                self._version,
            )
            self._changed = {}
            self._stale = False
        image: TopicsImage = self._image
        return image

    TopicRegistry.image = image  # type: ignore[method-assign]


def _append(store: Any, first: int, n: int, timestamp_ms: int) -> None:
    from coordinator.core import codec
    from coordinator.core import records as r
    from coordinator.runtime.store import StoredRecord

    chunk = 10_000
    for at in range(first, first + n, chunk):
        stored = [
            StoredRecord(*codec.encode(r.topic_record(f"t-{i:07d}", f"id-{i:07d}", 3)), None)
            for i in range(at, min(first + n, at + chunk))
        ]
        store.append(stored, timestamp_ms)


def _whole(registry: Any) -> Any:
    from coordinator.core.model import TopicImage, TopicsImage

    return TopicsImage.of(
        TopicImage(v.topic_id, n, v.num_partitions, v.partition_racks)
        for n, v in registry.topics.items()
    )


def _equal(rt: Any) -> bool:
    whole = _whole(rt.registry)
    return all(
        (reg.image().by_name, reg.image().by_id) == (whole.by_name, whole.by_id)
        for reg in (rt.registry, rt.committed.registry)
    )


class _Ticker:
    """A callback due every millisecond: its lateness and the loop thread's CPU between
    ticks."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.lateness: list[float] = []
        self.busy: list[float] = []
        self.cpu = time.thread_time()
        due = self.loop.time() + 0.001
        self.handle = self.loop.call_at(due, self.tick, due)

    def tick(self, due: float) -> None:
        now, spent = self.loop.time(), time.thread_time()
        self.lateness.append(now - due)
        self.busy.append(spent - self.cpu)
        self.cpu = spent
        self.handle = self.loop.call_at(now + 0.001, self.tick, now + 0.001)

    def since(self, at: int) -> tuple[float, float]:
        return max(self.lateness[at:], default=0.0) * 1e3, max(self.busy[at:], default=0.0) * 1e3


async def _run(topics: int, mode: str) -> dict[str, Any]:
    from assignors.uniform import UniformAssignor
    from coordinator.core.config import parse_config
    from coordinator.core.topics import NewTopic
    from coordinator.routing import CLUSTER_LOG
    from coordinator.runtime import CoordinatorRuntime
    from coordinator.runtime.store import MemoryRecordStore

    if mode == "before":
        _as_it_was()
    store = MemoryRecordStore(partitions=1)
    _append(store, 0, topics, 1_000)

    def node() -> Any:
        return CoordinatorRuntime(
            config=parse_config({"group.coordinator.shards": "1"}),
            store=MemoryRecordStore(_data=store._data),
            assignors=[UniformAssignor()],
        )

    out: dict[str, Any] = {"mode": mode, "topics": topics}
    # create: one topic a request, each then read in the committed copy
    rt = node()
    await rt.start()
    await asyncio.sleep(0.3)  # settle (the loop's collector)
    ticker = _Ticker()
    await asyncio.sleep(0.05)
    at = len(ticker.lateness)
    cpu: list[float] = []
    for i in range(CREATES):
        start = time.thread_time()
        done = await rt.create_topics([NewTopic(name=f"new-{i}", num_partitions=3)])
        assert done[0].error_code == 0, done
        rt.committed.registry.image()
        cpu.append(time.thread_time() - start)
    out["create_cpu_ms"] = median(cpu) * 1e3
    out["create_cpu_max_ms"] = max(cpu) * 1e3
    out["create_stall_ms"], out["create_stall_cpu_ms"] = ticker.since(at)
    out["equal"] = _equal(rt)
    ticker.handle.cancel()
    await rt.close()
    # catch-up: a node following the journal applies another writer's topics
    follower = node()
    parts = follower.share_partitions(2)
    await follower.start()
    parts.joined()
    await asyncio.sleep(0.3)
    ticker = _Ticker()
    await asyncio.sleep(0.05)
    at = len(ticker.lateness)
    _append(store, topics, FOLLOWED, 2_000)
    t0 = time.perf_counter()
    parts.follow_cluster_log(store.last_offset(CLUSTER_LOG))
    await parts.caught_up()
    follower.committed.registry.image()
    out["follow_ms"] = (time.perf_counter() - t0) * 1e3
    await asyncio.sleep(0.05)
    out["follow_stall_ms"], out["follow_stall_cpu_ms"] = ticker.since(at)
    out["equal"] = (
        out["equal"]
        and _equal(follower)
        and len(follower.registry.topics) == topics + CREATES + FOLLOWED
    )
    ticker.handle.cancel()
    await follower.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--topics", default="1000,10000,100000", help="topics in the registry")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("TOPICS", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print_child_result(_run(int(args.child[0]), args.child[1]))
        return
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    results, rows = alternate(
        __file__,
        (int(e) for e in args.topics.split(",")),
        args.repeat,
        MODES,
        lambda r: [
            f"{r['topics']:,}",
            r["mode"],
            f"{r['create_cpu_ms']:.2f} / {r['create_cpu_max_ms']:.1f}",
            f"{r['create_stall_ms']:.0f} / {r['create_stall_cpu_ms']:.0f}",
            f"{r['follow_stall_ms']:.0f} / {r['follow_stall_cpu_ms']:.0f}",
            f"{r['follow_ms']:.0f}",
            "yes" if r["equal"] else "NO",
        ],
    )
    summary = []
    for n in sorted({r["topics"] for r in results}):
        of_n = [r for r in results if r["topics"] == n]

        def med(key: str, mode: str, of_n: list[dict[str, Any]] = of_n) -> float:
            return median(r[key] for r in of_n if r["mode"] == mode)

        cpu = med("create_cpu_ms", "after")
        met = "met" if cpu <= TARGET_MS else "not met"
        summary.append(
            f"* **{n:,} topics: one topic created holds the loop {cpu:.2f} ms** (median; target "
            f"≤ {TARGET_MS:.0f} ms: {met}; at most {med('create_cpu_max_ms', 'after'):.1f} ms), "
            f"the longest stall over {CREATES} creations "
            f"{med('create_stall_ms', 'after'):.0f} ms; {FOLLOWED} topics caught up from the "
            f"journal: longest stall {med('follow_stall_ms', 'after'):.0f} ms. As before, in "
            f"the same run: {med('create_cpu_ms', 'before'):.2f} ms (at most "
            f"{med('create_cpu_max_ms', 'before'):.1f} ms), "
            f"{med('create_stall_ms', 'before'):.0f} ms; "
            f"{med('follow_stall_ms', 'before'):.0f} ms."
        )
    print("\n".join(summary))
    if args.no_doc:
        return
    cmd = command(
        "bench/topics_image.py",
        (("--topics", args.topics, "1000,10000,100000"), ("--repeat", args.repeat, 3)),
    )
    body = (
        f"## A topic change in a large registry (`{cmd}`)\n\n"
        f"{machine()}; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, {time.perf_counter() - started:.0f} s in all "
        "(the 2 cores are shared with other work: the stalls are wall time, rough).\n\n"
        "Every change to the topic registry gives the shards a new topics image. The store "
        "holds N topics; each run is a fresh process on a server's loop (uvloop and the loop's "
        f"garbage collector). *create*: {CREATES} topics created one request at a time, each "
        "followed by a read of the committed copy's image (what a group's read during a write "
        "of the cluster log reads); *CPU per creation*: the loop thread's CPU time for one "
        "(median / most: the most includes the copies that make a layered image's mappings "
        "plain dicts again); *longest stall*: the longest lateness of a callback due every millisecond "
        "(wall) / the loop thread's longest CPU time from one tick to the next. *catch-up*: "
        f"a second node applies {FOLLOWED} topics another writer created, from the journal. "
        "*before*: the image built whole from every topic after each change, as it was; "
        "*after*: built from the previous image and the topics changed, its mappings layered "
        "over the last ones (a copy of them now and then). *equal*: both "
        "registries' images equal images built whole.\n\n"
        + "\n".join(summary)
        + "\n\n"
        + table(
            [
                "topics",
                "image",
                "CPU per creation ms: median / max",
                "create: longest stall ms, wall / CPU",
                "catch-up: longest stall ms, wall / CPU",
                "catch-up ms",
                "equal",
                "load avg",
            ],
            rows,
        )
    )
    write_section("topics-image", body)


if __name__ == "__main__":
    main()
