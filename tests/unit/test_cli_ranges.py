"""Integers out of Kafka's ranges (INT32 partitions and counts, INT64 offsets), and other bad
numbers, are refused by every ``kip848`` command before anything is sent: exit 2 and one line
naming the flag and the range — never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.cli import main

HUGE = "99999999999999999999"  # beyond INT64
I32 = "2147483647"
I64 = "9223372036854775807"
CLIENT = ["--bootstrap-server", "127.0.0.1:1"]  # nothing listens there: nothing may be sent


@pytest.mark.parametrize(
    ("argv", "last_line"),
    [
        (
            ["topics", "create", "t", "--partitions", "99999999999", *CLIENT],
            "kip848 topics create: error: argument --partitions: expected an integer in "
            f"1..{I32}, got '99999999999'",
        ),
        (
            ["topics", "create", "t", "--partitions", "0", *CLIENT],
            f"kip848 topics create: error: argument --partitions: expected an integer in 1..{I32}, "
            "got '0'",
        ),
        (
            ["topics", "add-partitions", "t", "--count", "-3", *CLIENT],
            "kip848 topics add-partitions: error: argument --count: expected an integer in "
            f"1..{I32}, got '-3'",
        ),
        (
            ["groups", "reset-offsets", "g", "--all-topics", "--to-offset", HUGE, *CLIENT],
            "kip848 groups reset-offsets: error: argument --to-offset: expected an integer in "
            f"0..{I64}, got '{HUGE}'",
        ),
        (
            ["groups", "reset-offsets", "g", "--all-topics", "--to-offset", "-1", *CLIENT],
            "kip848 groups reset-offsets: error: argument --to-offset: expected an integer in "
            f"0..{I64}, got '-1'",
        ),
        (
            ["groups", "reset-offsets", "g", "--all-topics", "--shift-by", f"-{HUGE}", *CLIENT],
            "kip848 groups reset-offsets: error: argument --shift-by: expected an integer in "
            f"-9223372036854775808..{I64}, got '-{HUGE}'",
        ),
        (
            ["groups", "list", "--timeout", "0", *CLIENT],
            "kip848 groups list: error: argument --timeout: must be a number of seconds > 0 and "
            "<= 31536000, got '0'",
        ),
        (
            ["topics", "list", "--timeout", "nan", *CLIENT],
            "kip848 topics list: error: argument --timeout: must be a number of seconds > 0 and "
            "<= 31536000, got 'nan'",
        ),
        (
            ["configs", "describe", "--group", "g", "--timeout", "-1", *CLIENT],
            "kip848 configs describe: error: argument --timeout: must be a number of seconds > 0 "
            "and <= 31536000, got '-1'",
        ),
        (
            ["serve", "--max-message-bytes", "99999999999"],
            "kip848 serve: error: argument --max-message-bytes: expected an integer in "
            f"1024..{I32}, got '99999999999'",
        ),
        (
            ["serve", "--journal-retention-ms", "-1"],
            "kip848 serve: error: argument --journal-retention-ms: expected an integer in "
            f"0..{I64}, got '-1'",
        ),
        (
            ["simulate", "--members", "99999999999"],
            "kip848 simulate: error: argument --members: expected an integer in 1..1000, "
            "got '99999999999'",
        ),
        (
            ["simulate", "--seed", HUGE],
            "kip848 simulate: error: argument --seed: expected an integer in "
            f"-9223372036854775808..{I64}, got '{HUGE}'",
        ),
        (
            ["assignors", "check", "range", "--examples", "0"],
            "python -m assignors.conformance: error: argument --examples: expected an integer in "
            "1..100000, got '0'",
        ),
    ],
)
def test_argparse_refuses_out_of_range_numbers(
    capsys: pytest.CaptureFixture[str], argv: list[str], last_line: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out = capsys.readouterr()
    assert (exit_.value.code, out.out) == (2, "")
    assert out.err.splitlines()[-1] == last_line
    assert "Traceback" not in out.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["groups", "reset-offsets", "g", "--topic", "t:99999999999", "--to-offset", "0"],
            f"kip848 groups: --topic 't:99999999999': partitions are in 0..{I32} (Kafka's INT32)",
        ),
        (
            ["groups", "delete-offsets", "g", "--topic", f"t:0,{HUGE}"],
            f"kip848 groups: --topic 't:0,{HUGE}': partitions are in 0..{I32} (Kafka's INT32)",
        ),
        (
            ["groups", "reset-offsets", "g", "--topic", f"t:0-{I32}", "--to-offset", "0"],
            f"kip848 groups: --topic 't:0-{I32}': names more partitions than a topic can have "
            "(1000000)",
        ),
        (
            ["groups", "reset-offsets", "g", "--topic", "t:7-3", "--to-offset", "0"],
            "kip848 groups: --topic 't:7-3': the range 7-3 is empty (LOW-HIGH)",
        ),
    ],
)
def test_partition_specs_out_of_range(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, *CLIENT]) == 2
    assert capsys.readouterr() == ("", message + "\n")


def test_reset_offsets_csv_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "o.csv"
    for line in (f"t,{2**31},0", f"t,0,{HUGE}"):
        path.write_text(f"topic,partition,offset\n{line}\n")
        assert main(["groups", "reset-offsets", "g", "--from-file", str(path), *CLIENT]) == 2
        assert capsys.readouterr() == (
            "",
            f"kip848 groups: {path}:2: partition must be in 0..{I32} (Kafka's INT32) and offset "
            f"in 0..{I64} (INT64), got '{line}'\n",
        )
