"""Shared set-up of the benches' load.

* :func:`build` — the C load generators of ``bench/loadgen/`` (gcc, and libnghttp2 for the gRPC
  ones; the Kafka-protocol ones, ``kafkahb`` and ``kafkastorm``, need nothing beyond libc).
  ``scripts/bench`` installs their Debian packages (gcc, libnghttp2-dev). A generator is rebuilt
  when its source or one of the shared headers (``bench/loadgen/*.h``) is newer than the binary.
* :func:`create_topics` — CreateTopics on a fresh ``kip848 serve``, which listens before its
  store is loaded (COORDINATOR_LOAD_IN_PROGRESS until then): retried until it is, bounded.
* :func:`tree_cpu_s` — the CPU a server (and its front ends) used, to the nanosecond.
* :func:`checkouts` — temporary git worktrees of revisions of this repository, for benches
  that run servers of several revisions in one sitting (``--paired``).
* :func:`reconcile_until_stable` — members joined by hand (no client library) heartbeat until
  nothing changes for anyone *and* every group is Stable as the coordinator describes it: with
  assignment batching (``group.consumer.assignment.interval.ms``) a group's next target may
  still be due when nobody has anything new. Bounded.

grpc is imported where it is used: the benches import this module before deciding what runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

LOADGEN = Path(__file__).resolve().parent / "loadgen"
_LIBC = ctypes.CDLL(None, use_errno=True)
COORDINATOR_LOAD_IN_PROGRESS = 14


def build(name: str, *, libs: tuple[str, ...] = ("-lnghttp2",)) -> str:
    """Path of ``bench/loadgen/build/NAME``, compiled from ``bench/loadgen/NAME.c`` if needed
    and linked with ``libs`` (none for a generator that uses only libc)."""
    source = LOADGEN / f"{name}.c"
    binary = LOADGEN / "build" / name
    newest = max(p.stat().st_mtime for p in (source, *LOADGEN.glob("*.h")))
    if not binary.exists() or binary.stat().st_mtime < newest:
        binary.parent.mkdir(exist_ok=True)
        done = subprocess.run(
            ["gcc", "-O2", "-Wall", "-o", str(binary), str(source), *libs],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(
                f"cannot build bench/loadgen/{name}.c (run scripts/bench, which installs gcc"
                f"{' and libnghttp2-dev' if libs else ''}):\n{done.stderr}"
            )
    return str(binary)


def create_topics(address: str, topics: Mapping[str, int], timeout_s: float) -> dict[str, bytes]:
    """Create ``topics`` (name -> partitions) through the gRPC AdminService at ``address``,
    asking again every 50 ms while the store is loading, for up to ``timeout_s``. Returns each
    topic's id; RuntimeError (with the last response) if any topic was not created."""
    import grpc

    from kip848.v1 import admin_pb2, admin_pb2_grpc

    request = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n)
            for name, n in topics.items()
        ]
    )
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        while True:
            created = admin.CreateTopics(request, timeout=30)
            if created.error_code != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    ids = {t.name: t.topic_id for t in created.topics if t.error_code == 0}
    if created.error_code or ids.keys() != topics.keys():
        raise RuntimeError(f"CreateTopics failed: {created}")
    return ids


def reconcile_until_stable(
    heartbeat_all: Callable[[], bool],
    groups_stable: Callable[[], bool],
    timeout_s: float,
) -> None:
    """Call ``heartbeat_all`` (one heartbeat per member; True when any member's epoch or
    assignment changed) until a round changes nothing and ``groups_stable`` (a describe) says
    every group is Stable; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if time.monotonic() > deadline:
            raise AssertionError(f"members did not converge within {timeout_s:g} s")
        if heartbeat_all():
            continue
        if groups_stable():
            return
        time.sleep(0.1)


def grpc_groups_stable(stub: Any, group_ids: list[str]) -> bool:
    """Whether every group of ``group_ids`` is Stable (ConsumerGroupDescribe through ``stub``,
    a ConsumerGroupServiceStub)."""
    from kip848.v1 import consumer_group_pb2

    described = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=group_ids), timeout=30
    )
    return all(d.group_state == "Stable" for d in described.groups)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process ``pid`` and its children (front
    ends). Read from each process's CPU clock (``clock_getcpuclockid``: nanoseconds) rather
    than /proc's clock ticks (10 ms, ±0.5% of a 3 s slice); a process gone counts 0."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            pids += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    total = 0.0
    for p in pids:
        clock = ctypes.c_int()
        if _LIBC.clock_getcpuclockid(p, ctypes.byref(clock)) != 0:
            continue  # no such process (any more)
        try:
            total += time.clock_gettime(clock.value)
        except OSError:  # it exited between the two calls
            continue
    return total


@contextlib.contextmanager
def checkouts(revisions: list[str]) -> Iterator[list[tuple[str, str, Path]]]:
    """(revision as given, its short hash, a temporary worktree of it) for each revision."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="kip848-paired-") as tmp:
        out = []
        try:
            for i, rev in enumerate(revisions):
                short = subprocess.run(
                    ["git", "-C", str(repo), "rev-parse", "--short", rev],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip()
                tree = Path(tmp) / f"rev{i}"
                subprocess.run(
                    ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), short],
                    capture_output=True,
                    check=True,
                )
                out.append((rev, short, tree))
            yield out
        finally:
            for _rev, _short, tree in out:
                subprocess.run(
                    ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                    capture_output=True,
                    check=False,
                )
