"""Loading assignors (assignors/registry.py) and ``kip848 assignors list`` (assignors/cli.py):
built-in names, ``module:Class``, entry points of installed packages, and a clear error naming
the entry and the reason for every way a plugin can be broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assignors.cli import main as cli_main
from assignors.range import RangeAssignor
from assignors.registry import (
    AssignorConfigError,
    available_assignors,
    load_assignor,
    load_assignors,
    parse_assignor_list,
)
from assignors.uniform import UniformAssignor

PLUGIN_SOURCE = '''
from assignors.api import GroupAssignment

class FakeAssignor:
    """Gives nothing to anyone (test plugin)."""
    name = "fake"
    def assign(self, group_spec, topics):
        return GroupAssignment(members={m: {} for m in group_spec.members})

class Misnamed(FakeAssignor):
    name = "other"

class Exploding(FakeAssignor):
    name = "exploding"
    def __init__(self):
        raise RuntimeError("no config")

class Nameless:
    def assign(self, group_spec, topics):
        return None

class NoAssign:
    name = "noassign"

def not_a_class():
    return FakeAssignor()
'''


def install(
    root: Path,
    dist: str,
    version: str,
    entry_points: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A minimal installed distribution (dist-info + entry_points.txt) on sys.path."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"  # as wheels name it
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[kip848.assignors]\n{lines}\n")
    monkeypatch.syspath_prepend(str(root))


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fake_plugin_mod.py").write_text(PLUGIN_SOURCE)
    (tmp_path / "fake_broken_mod.py").write_text("raise ImportError('needs libfoo')\n")
    (tmp_path / "fake_needs_dep.py").write_text("import surely_not_installed_dep\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def error(entry: object) -> str:
    with pytest.raises(AssignorConfigError) as info:
        if isinstance(entry, str):
            load_assignor(entry)
        else:
            load_assignors(entry)  # type: ignore[arg-type]
    return str(info.value)


# ------------------------------------------------------------------ loading


def test_built_ins_by_name_in_order() -> None:
    loaded = load_assignors(["range", "uniform"])
    assert [type(a) for a in loaded] == [RangeAssignor, UniformAssignor]


def test_comma_separated_setting() -> None:
    assert parse_assignor_list(" uniform , range,pkg.mod:Cls ") == [
        "uniform",
        "range",
        "pkg.mod:Cls",
    ]
    assert [a.name for a in load_assignors("uniform, range")] == ["uniform", "range"]


def test_class_path(plugin_module: Path) -> None:
    (assignor,) = load_assignors(["fake_plugin_mod:FakeAssignor"])
    assert assignor.name == "fake"


def test_entry_point_of_an_installed_package(
    plugin_module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        plugin_module / "site",
        "fakeplug",
        "1.2",
        {"fake": "fake_plugin_mod:FakeAssignor"},
        monkeypatch,
    )
    (assignor,) = load_assignors(["fake"])
    assert type(assignor).__name__ == "FakeAssignor"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("nope.mod:X", "group.consumer.assignors: 'nope.mod:X': module 'nope.mod' not found"),
        (
            "fake_needs_dep:X",
            "group.consumer.assignors: 'fake_needs_dep:X': importing module 'fake_needs_dep' failed: No module named 'surely_not_installed_dep'",
        ),
        (
            "fake_broken_mod:X",
            "group.consumer.assignors: 'fake_broken_mod:X': importing module 'fake_broken_mod' failed: ImportError: needs libfoo",
        ),
        (
            "fake_plugin_mod:Missing",
            "group.consumer.assignors: 'fake_plugin_mod:Missing': module 'fake_plugin_mod' has no attribute 'Missing'",
        ),
        (
            "fake_plugin_mod:not_a_class",
            "group.consumer.assignors: 'fake_plugin_mod:not_a_class': it names a function, not a PartitionAssignor class",
        ),
        (
            "fake_plugin_mod:Nameless",
            "group.consumer.assignors: 'fake_plugin_mod:Nameless': class Nameless is not a PartitionAssignor: it needs a class attribute 'name' (a non-empty str)",
        ),
        (
            "fake_plugin_mod:NoAssign",
            "group.consumer.assignors: 'fake_plugin_mod:NoAssign': class NoAssign is not a PartitionAssignor: it has no assign(group_spec, topics) method",
        ),
        (
            "fake_plugin_mod:Exploding",
            "group.consumer.assignors: 'fake_plugin_mod:Exploding': constructor Exploding() failed: RuntimeError: no config",
        ),
        (
            ":X",
            "group.consumer.assignors: ':X': a class path must look like 'package.module:Class'",
        ),
    ],
)
def test_broken_class_paths(plugin_module: Path, entry: str, message: str) -> None:
    assert error(entry) == message


def test_unknown_name_lists_what_is_known() -> None:
    message = error("nope")
    assert message.startswith(
        "group.consumer.assignors: 'nope': unknown assignor: not built in, no installed package "
        "provides an entry point 'nope' in group 'kip848.assignors', and it is not a module:Class path"
    )
    assert "(known: " in message and "range" in message and "uniform" in message


def test_entry_point_problems(plugin_module: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(
        plugin_module / "one",
        "plug-one",
        "1.0",
        {
            "twice": "fake_plugin_mod:FakeAssignor",
            "other": "fake_plugin_mod:FakeAssignor",
            "broken": "fake_broken_mod:X",
        },
        monkeypatch,
    )
    install(
        plugin_module / "two",
        "plug-two",
        "2.0",
        {"twice": "fake_plugin_mod:FakeAssignor"},
        monkeypatch,
    )
    assert error("twice") == (
        "group.consumer.assignors: 'twice': several installed packages provide it "
        "(plug-one 1.0, plug-two 2.0); use a module:Class path to choose"
    )
    assert error("other") == (
        "group.consumer.assignors: 'other': class FakeAssignor is named 'fake'; "
        "the entry point name must equal the assignor's name"
    )
    assert error("broken") == (
        "group.consumer.assignors: 'broken': loading entry point 'fake_broken_mod:X' from "
        "plug-one 1.0 failed: ImportError: needs libfoo"
    )


def test_duplicate_and_empty_lists(plugin_module: Path) -> None:
    assert error(["uniform", "assignors.uniform:UniformAssignor"]) == (
        "group.consumer.assignors: 'assignors.uniform:UniformAssignor': duplicate assignor name "
        "'uniform' (already provided by 'uniform')"
    )
    assert error([]) == "group.consumer.assignors is empty: name at least one assignor"
    with pytest.raises(AssignorConfigError) as info:
        load_assignors("uniform,,range")
    assert str(info.value) == "group.consumer.assignors='uniform,,range': empty entry in the list"


# ------------------------------------------------------------------ listing


def test_list_shows_built_ins(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "SOURCE", "DESCRIPTION"]
    assert lines[1].split()[:2] == ["uniform", "built-in"]
    assert lines[1].endswith(UniformAssignor.__doc__.strip().splitlines()[0])  # type: ignore[union-attr]
    assert lines[2].split()[:2] == ["range", "built-in"]


def test_list_shows_plugins_with_their_package_and_broken_ones(
    plugin_module: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install(
        plugin_module / "site",
        "fakeplug",
        "1.2",
        {"fake": "fake_plugin_mod:FakeAssignor", "broken": "fake_broken_mod:X"},
        monkeypatch,
    )
    assert cli_main(["list"]) == 1  # a broken plugin makes the listing fail
    out = capsys.readouterr().out
    assert "fake     entry point fakeplug 1.2  Gives nothing to anyone (test plugin)." in out
    assert "broken   entry point fakeplug 1.2  BROKEN: group.consumer.assignors: 'broken': " in out
    rows = {row.name: row for row in available_assignors()}
    assert rows["fake"].target == "fake_plugin_mod:FakeAssignor" and rows["fake"].error is None
    assert cli_main(["list", "--json"]) == 1
    parsed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {
        "name": "fake",
        "source": "entry point fakeplug 1.2",
        "target": "fake_plugin_mod:FakeAssignor",
        "description": "Gives nothing to anyone (test plugin).",
        "error": None,
    } in parsed


def test_kip848_command_delegates(capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator.cli import main as kip848

    assert kip848(["assignors", "list"]) == 0
    assert "uniform" in capsys.readouterr().out


def test_check_subcommand_runs_the_kit(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["check", "range", "--examples", "5", "--no-hash-seeds"]) == 0
    assert "Conformance report for range" in capsys.readouterr().out
