"""N workers share M units of work through the coordinator; watch the hand-offs live.

    python demo.py                      # its own coordinator, 3 workers, 12 units
    python demo.py --workers 4 --units 24 --target 127.0.0.1:9094

Keys: ``a`` add a worker, ``k`` kill -9 a worker, ``s`` stop a worker gracefully, ``q`` quit.
``--script "3:add,8:kill,14:stop,20:quit"`` runs the same actions at those seconds instead
(unattended); ``--headless`` prints events and a summary instead of the live table.

Each unit is a partition of the topic ``units``; each worker (``worker.py``, one process each)
is a ``kip848.client`` member. The table shows, per unit, the worker that owns it (from the
workers' callbacks), the coordinator's target owner (from ConsumerGroupDescribe), its progress
(the position its owners reached; a new owner resumes from the committed offset) and how long
its last hand-off left it without an owner. Only the units that must move, move.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tty
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from kip848.v1 import admin_pb2, admin_pb2_grpc, consumer_group_pb2, consumer_group_pb2_grpc

HERE = Path(__file__).resolve().parent
GROUP = "work-distribution"
TOPIC = "units"


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen
    member_id: str = ""
    state: str = "starting"  # starting | running | stopping | stopped | killed


@dataclass
class Unit:
    owner: str | None = None
    target: str | None = None
    position: int = 0
    released_at: float | None = None  # when the last owner gave it up
    last_gap_ms: float | None = None
    moves: int = 0


@dataclass
class Dashboard:
    target: str
    units: dict[int, Unit]
    workers: dict[str, Worker] = field(default_factory=dict)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=12))
    lock: threading.Lock = field(default_factory=threading.Lock)
    names: itertools.count = field(default_factory=lambda: itertools.count(1))
    violations: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    headless: bool = False
    inbox: list[tuple[float, int, str, dict]] = field(default_factory=list)
    seq: itertools.count = field(default_factory=itertools.count)

    # Events come from several pipes: they are applied in the order of their timestamps
    # (``time.monotonic`` is one clock for every process of the machine), once they are
    # REORDER_S old, so a revocation is never seen after the assignment it made room for.
    REORDER_S = 0.2

    # ------------------------------------------------------------ workers

    def add(self) -> None:
        name = f"w{next(self.names)}"
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py"), "--target", self.target, "--name", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        with self.lock:
            self.workers[name] = Worker(name, proc)
        threading.Thread(target=self._read, args=(name, proc), daemon=True).start()
        self.note(f"{name} starts")

    def pick(self) -> Worker | None:
        with self.lock:
            alive = [w for w in self.workers.values() if w.state == "running"]
        return random.choice(alive) if alive else None

    def kill(self) -> None:
        w = self.pick()
        if w is None:
            return
        w.proc.kill()  # no callbacks, no leave: the coordinator notices at the session timeout
        w.proc.wait()
        self.post(w.name, {"t": time.monotonic(), "event": "killed"})

    def stop(self, w: Worker | None = None) -> None:
        w = w or self.pick()
        if w is None:
            return
        w.state = "stopping"
        w.proc.send_signal(signal.SIGTERM)
        self.note(f"{w.name} stops (revokes its units, leaves)")

    def _read(self, name: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.post(name, json.loads(line))

    def post(self, name: str, event: dict) -> None:
        with self.lock:
            heapq.heappush(self.inbox, (event["t"], next(self.seq), name, event))

    def apply_due(self, everything: bool = False) -> None:
        horizon = float("inf") if everything else time.monotonic() - self.REORDER_S
        while True:
            with self.lock:
                if not self.inbox or self.inbox[0][0] > horizon:
                    return
                _t, _s, name, event = heapq.heappop(self.inbox)
            self.on_event(name, event)

    def on_event(self, name: str, e: dict) -> None:
        with self.lock:
            w = self.workers[name]
            kind = e["event"]
            if kind == "killed":
                w.state = "killed"
                for unit in self.units.values():
                    if unit.owner == name:
                        unit.owner, unit.released_at = None, e["t"]
                self.log.append(
                    f"{self.clock()} {name} killed (kill -9): its units wait for its session to expire"
                )
            elif kind == "started":
                w.member_id, w.state = e["member_id"], "running"
            elif kind == "stopped":
                w.state = "stopped"
            elif kind == "progress":
                for number, position in e["positions"].items():
                    self.units[int(number)].position = position
            elif kind == "assigned":
                for number in e["units"]:
                    unit = self.units[number]
                    if unit.owner is not None:
                        self.violations.append(f"unit {number}: {name} got it from {unit.owner}")
                    unit.owner = name
                    unit.moves += 1
                    if unit.released_at is not None:
                        unit.last_gap_ms = (e["t"] - unit.released_at) * 1000
                        unit.released_at = None
                gap = self._gaps(e["units"])
                self.log.append(f"{self.clock()} {name} assigned {_units(e['units'])}{gap}")
            elif kind in ("revoked", "lost"):
                for number in e["units"]:
                    unit = self.units[number]
                    if unit.owner == name:
                        unit.owner, unit.released_at = None, e["t"]
                self.log.append(f"{self.clock()} {name} {kind} {_units(e['units'])}")
        if self.headless and kind in ("assigned", "revoked", "lost", "killed"):
            print(self.log[-1], flush=True)

    def _gaps(self, numbers: list[int]) -> str:
        gaps = [self.units[n].last_gap_ms for n in numbers if self.units[n].last_gap_ms is not None]
        return f" ({max(gaps):.0f} ms without an owner)" if gaps else ""

    def note(self, text: str) -> None:
        with self.lock:
            self.log.append(f"{self.clock()} {text}")
        if self.headless:
            print(text, flush=True)

    def clock(self) -> str:
        return f"{time.monotonic() - self.started:7.2f}s"

    # ------------------------------------------------------------ the coordinator's view

    def poll_targets(self, stub: consumer_group_pb2_grpc.ConsumerGroupServiceStub) -> None:
        try:
            resp = stub.ConsumerGroupDescribe(
                consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP]), timeout=2
            )
        except grpc.RpcError:
            return
        with self.lock:
            by_id = {w.member_id: w.name for w in self.workers.values()}
            targets: dict[int, str] = {}
            for g in resp.groups:
                for m in g.members:
                    for tp in m.target_assignment.topic_partitions:
                        for p in tp.partitions:
                            targets[p] = by_id.get(m.member_id, m.member_id[:6])
            for number, unit in self.units.items():
                unit.target = targets.get(number)

    # ------------------------------------------------------------ rendering

    def render(self) -> Group:
        with self.lock:
            table = Table(title=f"{len(self.units)} units of work, group {GROUP!r}", expand=True)
            for col in ("unit", "owner", "coordinator's target", "progress", "last hand-off"):
                table.add_column(col, justify="right" if col in ("unit", "progress") else "left")
            for number, unit in sorted(self.units.items()):
                if unit.owner is None:
                    owner = "[bold red]— none —[/]"
                elif unit.target not in (None, unit.owner):
                    owner = f"[yellow]{unit.owner} → {unit.target}[/]"
                else:
                    owner = f"[green]{unit.owner}[/]"
                gap = "" if unit.last_gap_ms is None else f"{unit.last_gap_ms:.0f} ms unowned"
                table.add_row(str(number), owner, unit.target or "", str(unit.position), gap)
            workers = Table(title="workers", expand=True)
            for col in ("worker", "pid", "state", "units"):
                workers.add_column(col)
            for w in self.workers.values():
                mine = sorted(n for n, u in self.units.items() if u.owner == w.name)
                workers.add_row(w.name, str(w.proc.pid), w.state, _units(mine))
            log = "\n".join(self.log)
        keys = "[b]a[/] add   [b]k[/] kill -9   [b]s[/] stop gracefully   [b]q[/] quit"
        return Group(table, workers, Panel(log, title="events"), Panel(keys))

    def summary(self) -> str:
        gaps = [u.last_gap_ms for u in self.units.values() if u.last_gap_ms is not None]
        owned = sum(1 for u in self.units.values() if u.owner is not None)
        lines = [
            f"units owned at the end: {owned}/{len(self.units)}",
            f"hand-offs: {sum(max(0, u.moves - 1) for u in self.units.values())}"
            + (f", longest time without an owner: {max(gaps):.0f} ms" if gaps else ""),
            f"units owned by two workers at once: {len(self.violations)}",
        ]
        return "\n".join(lines + self.violations)


def _units(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers) or "-"


# ---------------------------------------------------------------- the coordinator


def start_coordinator(data_dir: str) -> tuple[subprocess.Popen, str]:
    """``kip848 serve`` on a free port, with a 1 s heartbeat interval and a 6 s session."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "coordinator.cli", "serve",
            "--listen", "127.0.0.1:0", "--data-dir", data_dir,
            "--set", "group.consumer.min.heartbeat.interval.ms=100",
            "--set", "group.consumer.heartbeat.interval.ms=1000",
            "--set", "group.consumer.min.session.timeout.ms=1000",
            "--set", "group.consumer.session.timeout.ms=6000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit("kip848 serve did not start")
    return proc, line.removeprefix("listening on ").strip()


def create_units(target: str, units: int) -> None:
    with grpc.insecure_channel(target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        for _ in range(100):  # the store may still be loading
            resp = admin.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(
                            name=TOPIC, num_partitions=units
                        )
                    ]
                ),
                timeout=10,
            )
            code = resp.topics[0].error_code if resp.topics else resp.error_code
            if code in (0, 36):  # created, or TOPIC_ALREADY_EXISTS (another demo run)
                return
            time.sleep(0.1)
        raise SystemExit(f"cannot create topic {TOPIC!r}: {resp}")


# ---------------------------------------------------------------- main


def parse_script(text: str) -> list[tuple[float, str]]:
    steps = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        at, action = item.split(":")
        if action not in ("add", "kill", "stop", "quit"):
            raise SystemExit(f"unknown action {action!r} (add, kill, stop, quit)")
        steps.append((float(at), action))
    return sorted(steps)


def keys() -> str | None:
    """One key pressed (None if none within 0.1 s)."""
    ready, _, _ = select.select([sys.stdin], [], [], 0.1)
    return sys.stdin.read(1) if ready else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--units", type=int, default=12)
    parser.add_argument("--target", help="an existing coordinator (default: start one)")
    parser.add_argument("--script", help='timed actions, e.g. "3:add,8:kill,14:stop,20:quit"')
    parser.add_argument("--headless", action="store_true", help="no live table")
    args = parser.parse_args()
    script = parse_script(args.script) if args.script else None
    interactive = script is None and sys.stdin.isatty()

    with tempfile.TemporaryDirectory(prefix="kip848-demo-") as data_dir:
        server = None
        target = args.target
        if target is None:
            server, target = start_coordinator(data_dir)
        create_units(target, args.units)
        board = Dashboard(target, {n: Unit() for n in range(args.units)}, headless=args.headless)
        for _ in range(args.workers):
            board.add()
        channel = grpc.insecure_channel(target)
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        old_tty = termios.tcgetattr(sys.stdin) if interactive else None
        final = "interrupted"
        try:
            if interactive:
                tty.setcbreak(sys.stdin.fileno())
            live = (
                contextlib.nullcontext()
                if args.headless
                else Live(board.render(), console=Console(), refresh_per_second=8)
            )
            with live as view:
                while True:
                    board.apply_due()
                    board.poll_targets(stub)
                    if view is not None:
                        view.update(board.render())
                    if interactive:
                        action = {"a": "add", "k": "kill", "s": "stop", "q": "quit"}.get(
                            keys() or ""
                        )
                    else:
                        time.sleep(0.1)
                        action = None
                        elapsed = time.monotonic() - board.started
                        if script and script[0][0] <= elapsed:
                            action = script.pop(0)[1]
                    if action == "quit":
                        time.sleep(board.REORDER_S)
                        board.apply_due(everything=True)
                        final = board.summary()
                        break
                    if action is not None:
                        getattr(board, action)()
        finally:
            if old_tty is not None:
                termios.tcsetattr(sys.stdin, termios.TCSADRAIN, old_tty)
            for w in list(board.workers.values()):
                if w.proc.poll() is None:
                    board.stop(w)
            for w in board.workers.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(timeout=30)
                if w.proc.poll() is None:
                    w.proc.kill()
            channel.close()
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
        board.apply_due(everything=True)
        print(("" if args.headless else "\n") + final)
        sys.exit(1 if board.violations else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
