"""``kip848 groups`` helpers that need no server: partition specs, the reset-offsets CSV, usage
errors (exit 2) before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.cli.errors import UsageError
from coordinator.cli.group_offsets import parse_topic_partitions, read_offsets_csv


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("orders", ("orders", None)),
        ("orders:3", ("orders", [3])),
        ("orders:4,0,2-3,2", ("orders", [0, 2, 3, 4])),
        ("a.b-c_d:0", ("a.b-c_d", [0])),
    ],
)
def test_topic_partition_specs(spec: str, parsed: tuple[str, list[int] | None]) -> None:
    assert parse_topic_partitions(spec) == parsed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (":1", "--topic expects TOPIC or TOPIC:PARTITIONS, got ':1'"),
        ("t:", "--topic 't:': partitions are numbers, e.g. t:0,2,4-7"),
        ("t:x", "--topic 't:x': partitions are numbers, e.g. t:0,2,4-7"),
        ("t:-1", "--topic 't:-1': partitions are numbers, e.g. t:0,2,4-7"),
    ],
)
def test_bad_topic_partition_specs(spec: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_topic_partitions(spec)
    assert str(err.value) == message


def test_offsets_csv(tmp_path: Path) -> None:
    path = tmp_path / "o.csv"
    path.write_text("Topic, Partition, Offset\n\n# comment\norders,1,10\n payments , 0 , 0 \n")
    assert read_offsets_csv(str(path)) == {("orders", 1): 10, ("payments", 0): 0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders,1\n", "{p}:1: expected topic,partition,offset, got 'orders,1'"),
        ("orders,1,x\n", "{p}:1: expected topic,partition,offset, got 'orders,1,x'"),
        (",1,2\n", "{p}:1: expected topic,partition,offset, got ',1,2'"),
        ("orders,1,-2\n", "{p}:1: partition and offset must be >= 0, got 'orders,1,-2'"),
        ("orders,1,2\norders,1,3\n", "{p}:2: orders-1 appears twice"),
        ("# nothing\n", "{p}: no offsets in the file"),
    ],
)
def test_bad_offsets_csv(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "o.csv"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_offsets_csv(str(path))
    assert str(err.value) == message.format(p=path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["groups", "reset-offsets", "--topic", "t", "--to-offset", "1"],
            "kip848 groups: reset-offsets: name one group (GROUP or --group GROUP)\n",
        ),
        (
            ["groups", "reset-offsets", "g", "--group", "h", "--topic", "t", "--to-offset", "1"],
            "kip848 groups: reset-offsets: name one group (GROUP or --group GROUP), not 2\n",
        ),
        (
            ["groups", "describe"],
            "kip848 groups: describe: name the groups (GROUP... or --group GROUP) or give "
            "--all-groups\n",
        ),
        (
            ["groups", "describe", "g", "--all-groups"],
            "kip848 groups: describe: --all-groups and group names exclude each other\n",
        ),
        (
            ["groups", "delete", "--group", "g", "--all-groups"],
            "kip848 groups: delete: --all-groups and group names exclude each other\n",
        ),
        (
            ["groups", "list", "--state", "stable,sleeping"],
            "kip848 groups: list: invalid state 'sleeping'; valid states are: PreparingRebalance, "
            "CompletingRebalance, Stable, Dead, Empty, Assigning, Reconciling, NotReady\n",
        ),
        (
            ["groups", "list", "--type", "consumer", "--type", "simple"],
            "kip848 groups: list: invalid type 'simple'; valid types are: classic, consumer, "
            "share, streams\n",
        ),
        (
            ["groups", "reset-offsets", "g", "--topic", "t", "--from-file", "x.csv"],
            "kip848 groups: reset-offsets: --from-file names its own partitions; drop --topic/--all-topics\n",
        ),
        (
            ["configs", "alter", "--group", "g", "--add-config", "a"],
            "kip848 configs: --add-config expects NAME=VALUE[,NAME=VALUE...], got 'a'\n",
        ),
        (
            ["configs", "alter", "--group", "g", "--add-config", "a=1", "--delete-config", "a"],
            "kip848 configs: configs alter: a both added and deleted\n",
        ),
    ],
)
def test_usage_errors_exit_2_without_a_server(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, "--bootstrap-server", "127.0.0.1:1"]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", message)


def test_reset_needs_a_way_and_one_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["groups", "reset-offsets", "g", "--topic", "t"])
    assert exit_.value.code == 2
    assert (
        "one of the arguments --to-offset --shift-by --from-file --to-earliest --to-latest "
        "--to-datetime --by-duration is required" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(
            [
                "groups",
                "reset-offsets",
                "g",
                "--topic",
                "t",
                "--to-offset",
                "1",
                "--dry-run",
                "--execute",
            ]
        )
    assert "argument --execute: not allowed with argument --dry-run" in capsys.readouterr().err
