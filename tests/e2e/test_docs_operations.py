"""docs/operations.md, run as written: its tables of verbs and of ``serve`` flags against the
real parser, and its ``$ kip848 ...`` examples against a real ``kip848 serve`` on 127.0.0.1:0,
their output compared line for line (topic ids and group uids masked: they are random; a
``...`` in the doc stands for any text). An example that changes in the doc or in the code
fails here (it once showed a per-topic error as ``kip848: orders: ...``, a ``listeners`` line
as an unknown setting, a shift of partitions without offsets as a plan, and a ``dump`` line
without its ``partition_racks``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ServerProcess

from coordinator.cli.commands import build
from kip848.v1 import common_pb2

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "operations.md").read_text()
CLIENT_COMMANDS = ("topics", "groups", "configs", "acls", "users")


def examples(doc: str) -> dict[str, list[str]]:
    """Every ``$ kip848 ...`` line of the doc's fenced blocks (its ``# comment`` dropped) ->
    the output lines shown under it."""
    found: dict[str, list[str]] = {}
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", doc, re.S | re.M):
        command = None
        for line in block.splitlines():
            if line.startswith("$ "):
                command = " ".join(shlex.split(line[2:], comments=True))
                found[command] = []
            elif command is not None:
                found[command].append(line)
    return found


EXAMPLES = examples(DOC)


def masked(text: str) -> list[str]:
    """Lines with topic ids (22 base64url characters) and group uids masked."""
    text = re.sub(r"(?<![\w-])[A-Za-z0-9_-]{22}(?![\w-])", "<ID>", text)
    text = re.sub(r"cgp_[0-9A-Z]{26}", "<UID>", text)
    return [line.rstrip() for line in text.splitlines()]


def matches(expected: list[str], actual: list[str]) -> bool:
    """``actual == expected``, a ``...`` of the doc matching any text."""
    if len(expected) != len(actual):
        return False
    for want, got in zip(expected, actual, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        if not re.fullmatch(pattern, got):
            return False
    return True


def kip848(*argv: str, cwd: Path | None = None) -> tuple[int, list[str]]:
    """``kip848 ARGV`` in a child process (this checkout first): exit code, and its stdout's
    lines then its stderr's, masked."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
        check=False,
    )
    return done.returncode, masked(done.stdout) + masked(done.stderr)


def run_example(command: str, server: ServerProcess | None = None, cwd: Path | None = None) -> int:
    """Run the doc's ``$ command`` (a client command against ``server``) and check that it
    prints what the doc shows; its exit code."""
    assert command in EXAMPLES, f"docs/operations.md no longer shows `$ {command}`"
    argv = shlex.split(command)[1:]
    if server is not None and argv[0] in CLIENT_COMMANDS:
        argv += ["--bootstrap-server", server.address]
    code, out = kip848(*argv, cwd=cwd)
    expected = masked("\n".join(EXAMPLES[command]))
    assert matches(expected, out), (command, expected, out)
    return code


def table_rows(heading: str) -> list[str]:
    """The first column of the table that follows ``heading`` in the doc."""
    after = DOC.split(heading, 1)[1]
    rows = re.findall(r"^\| (.*?) \|", after.split("\n\n", 2)[1], re.M)
    return [r for r in rows if not set(r) <= {"-", "|"}][1:]  # no header, no rule


def test_the_verb_table_lists_every_command_in_the_order_of_help() -> None:
    parser, commands = build()
    [sub] = [a for a in parser._actions if a.dest == "command"]
    verbs = list(sub.choices)  # the parser's order, as --help lists them
    rows = table_rows("Every verb, in the order of `kip848 --help`:")
    listed = [word.split()[0] for row in rows for word in re.findall(r"`([^`]+)`", row)]
    assert listed == verbs
    # Each row names exactly the actions of its command.
    for row in rows:
        words = re.findall(r"`([^`]+)`", row)
        if len(words) != 1 or " " not in words[0]:
            continue
        verb, actions = words[0].split(" ", 1)
        if verb in commands.delegated:  # parses its own arguments (assignors)
            continue
        sub_parser = sub.choices[verb]
        [inner] = [a for a in sub_parser._actions if a.choices]
        assert actions.replace("\\", "").split("|") == list(inner.choices), verb


def test_the_serve_flag_table_lists_every_flag() -> None:
    parser, _commands = build()
    [sub] = [a for a in parser._actions if a.dest == "command"]
    flags = {
        option
        for action in sub.choices["serve"]._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    }
    documented = {
        flag
        for row in table_rows("`kip848 serve` flags:")
        for flag in re.findall(r"--[a-z-]+", row)
    }
    assert flags - documented == set()
    assert documented - flags == set()


def test_the_configuration_errors_are_as_shown(tmp_path: Path) -> None:
    code = run_example("kip848 serve --set group.consumer.session.timeout.ms=abc", cwd=tmp_path)
    assert code == 2
    (tmp_path / "coordinator.properties").write_text(
        "group.consumer.session.timeout.ms=45000\n# the rest of a broker's file:\n"
        "log.dirs=/var/lib/kafka\n"
    )
    assert run_example("kip848 serve --config-file coordinator.properties", cwd=tmp_path) == 2


def test_the_examples_against_a_server(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", batching=True)  # Kafka 4.3's defaults
    try:
        run_examples(server)
    finally:
        assert server.stop() == 0, server.stderr_text()
    # The store offline: the topic as `dump --output json` shows it.
    shown = json.loads(
        EXAMPLES["kip848 dump --data-dir ./var --output json | head -2"][0].replace(
            "hR3kbUv1Qvmx2N3xkJgG2A", "<ID>"
        )
    )
    code, out = kip848("dump", "--data-dir", str(server.data_dir), "--output", "json")
    assert code == 0
    topics = [json.loads(line) for line in out if '"type": "Topic"' in line]
    [orders] = [t for t in topics if t["key"] == {"name": "orders"}]
    assert {**orders, "offset": 0} == shown


def run_examples(s: ServerProcess) -> None:
    assert (
        run_example(
            "kip848 topics create orders --partitions 12 --replica-racks "
            "eu-1a,eu-1b;eu-1b,eu-1c;eu-1c,eu-1a",
            s,
        )
        == 0
    )
    # `topics list` shows topics without racks: orders again, and payments.
    assert kip848("topics", "delete", "orders", "--bootstrap-server", s.address)[0] == 0
    s.create_topic("orders", 12)
    s.create_topic("payments", 4)
    assert run_example("kip848 topics list", s) == 0
    assert run_example("kip848 topics create invoices --partitions 12 --validate-only", s) == 0
    assert run_example("kip848 topics add-partitions orders --count 6 --validate-only", s) == 1
    assert run_example("kip848 groups validate-regex pay.*|ord.*", s) == 0
    # "Each topic command prints ... with --output json, one object per topic": its keys.
    for argv, keys in (
        (("create", "t1", "--partitions", "2"), ["name", "topic_id", "num_partitions", "error"]),
        (("add-partitions", "t1", "--count", "3"), ["name", "count", "error"]),
        (("delete", "t1", "t2"), ["name", "topic_id", "error"]),
    ):
        _code, out = kip848("topics", *argv, "--output", "json", "--bootstrap-server", s.address)
        shown = json.loads("\n".join(out[: out.index("]") + 1]))
        assert [list(t) for t in shown] == [keys] * len(shown), shown
    assert shown[1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION: The topic 't2' does not exist."

    # An offsets-only group, and shop's offset 500 on orders-0, then its member A.
    for group, topic, offset in (("audit", "payments:1", "7"), ("shop", "orders:0", "500")):
        code, _ = kip848(
            *("groups", "reset-offsets", group, "--topic", topic, "--to-offset", offset),
            *("--execute", "--bootstrap-server", s.address),
        )
        assert code == 0
    assert run_example("kip848 groups reset-offsets shop --topic orders:0 --shift-by -100", s) == 0
    joined = s.heartbeat(
        "shop-app",
        group_id="shop",
        member_id="A",
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=common_pb2.TopicNames(names=["orders"]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )
    assert joined.error_code == 0, joined
    assert run_example("kip848 groups list", s) == 0
    assert run_example("kip848 groups delete shop", s) == 1
    command = "kip848 groups reset-offsets shop --topic orders --to-offset 0 --execute"
    assert run_example(command, s) == 1
    assert run_example("kip848 configs describe --group shop", s) == 0

    acl = "--allow-principal User:alice"
    command = f"kip848 acls add {acl} --operation Read --group payments- "
    assert run_example(command + "--resource-pattern-type prefixed", s) == 0
    assert run_example("kip848 acls list", s) == 0
    assert run_example(f"kip848 acls remove --group payments- {acl}", s) == 0
