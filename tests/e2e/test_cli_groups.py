"""End-to-end: the real ``kip848`` operator commands (groups, configs) against a real server, output
checked whole: human tables, ``--output json``, errors with their Kafka name and a hint, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServerProcess, join_request, owned

from coordinator.core.model import topic_id_from_bytes
from kip848.v1 import common_pb2, offsets_pb2, offsets_pb2_grpc

OC = offsets_pb2.OffsetCommitRequest
OF = offsets_pb2.OffsetFetchRequest


def kip848(server: ServerProcess | None, *args: str) -> tuple[int, str, str]:
    address = server.address if server is not None else "127.0.0.1:1"
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args, "--bootstrap-server", address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def lines(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


def commit(
    s: ServerProcess,
    group: str,
    offsets: dict[tuple[str, int], int],
    epoch: int | None = None,
    member_id: str = "",
    metadata: str | None = None,
) -> None:
    req = OC(group_id=group, member_id=member_id)
    if epoch is not None:
        req.generation_id_or_member_epoch = epoch
    for (topic, p), o in offsets.items():
        partition = OC.Partition(partition_index=p, committed_offset=o)
        if metadata is not None:
            partition.committed_metadata = metadata
        req.topics.add(name=topic, partitions=[partition])
    resp = offsets_pb2_grpc.OffsetServiceStub(s.channel).OffsetCommit(req, timeout=10)
    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions), resp


def offsets_of(s: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    resp = offsets_pb2_grpc.OffsetServiceStub(s.channel).OffsetFetch(
        OF(groups=[OF.Group(group_id=group)]), timeout=10
    )
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in resp.groups[0].topics
        for p in t.partitions
    }


@pytest.fixture(scope="module")
def shop(manual_server: ServerProcess) -> dict[str, str]:
    """Topic ``orders`` (3 partitions); group ``shop`` with member A (client ``shop-app``) owning
    every partition and an offset on orders-0; an offsets-only group ``audit``."""
    s = manual_server
    t = s.create_topic("orders", 3)
    s.create_topic("payments", 2)
    s.heartbeat(client_id="shop-app", **join_request("shop", ["orders"], member_id="A"))
    s.heartbeat(
        client_id="shop-app",
        group_id="shop",
        member_id="A",
        member_epoch=1,
        topic_partitions=owned((t, [0, 1, 2])),
    )
    commit(s, "shop", {("orders", 0): 42}, epoch=1, member_id="A", metadata="m1")
    commit(s, "audit", {("payments", 1): 7})
    uid = s.describe("shop").groups[0].group_uid
    return {"orders": topic_id_from_bytes(t), "uid": uid}


def test_groups_list(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    assert kip848(s, "groups", "list") == (
        0,
        lines(
            "GROUP  TYPE      STATE   PROTOCOL",
            "audit  classic   Empty   -",
            "shop   consumer  Stable  consumer",
        ),
        "",
    )
    assert kip848(
        s, "groups", "list", "--state", "stable", "--type", "CONSUMER", "--output", "json"
    ) == (
        0,
        json.dumps(
            [
                {
                    "group_id": "shop",
                    "group_type": "consumer",
                    "group_state": "Stable",
                    "protocol_type": "consumer",
                },
            ],
            indent=2,
        )
        + "\n",
        "",
    )
    assert kip848(s, "groups", "list", "--type", "classic,share") == (
        0,
        lines("GROUP  TYPE     STATE  PROTOCOL", "audit  classic  Empty  -"),
        "",
    )
    # Kafka's `--list --state` without a value: no filter (the STATE column is always there).
    assert kip848(s, "groups", "list", "--state") == kip848(s, "groups", "list")
    assert kip848(s, "groups", "list", "--state", "Reconciling") == (
        0,
        lines("GROUP  TYPE  STATE  PROTOCOL"),
        "",
    )


def test_groups_describe_sections(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    header = f"GROUP shop  uid {shop['uid']}  state Stable  epoch 1  assignment epoch 1  assignor uniform  members 1"
    members = (
        "MEMBER  EPOCH  TYPE      CLIENT    HOST        INSTANCE  #PARTITIONS",
        "A       1      consumer  shop-app  /127.0.0.1  -         3",
    )
    verbose = (
        "MEMBER  EPOCH  TYPE      CLIENT    HOST        INSTANCE  RACK  RACK-LOCAL  SUBSCRIPTION  ASSIGNED      TARGET",
        "A       1      consumer  shop-app  /127.0.0.1  -         -     -           orders        orders:0/1/2  orders:0/1/2",
    )
    offsets = (
        "TOPIC   PARTITION  COMMITTED-OFFSET  LEADER-EPOCH  METADATA  MEMBER  HOST        CLIENT",
        "orders  0          42                -             m1        A       /127.0.0.1  shop-app",
        "orders  1          -                 -             -         A       /127.0.0.1  shop-app",
        "orders  2          -                 -             -         A       /127.0.0.1  shop-app",
    )
    assert kip848(s, "groups", "describe", "shop") == (0, lines(header, "", *members), "")
    assert kip848(s, "groups", "describe", "shop", "--state") == (0, lines(header), "")
    assert kip848(s, "groups", "describe", "shop", "--offsets") == (
        0,
        lines("GROUP shop", "", *offsets),
        "",
    )
    assert kip848(s, "groups", "describe", "shop", "--state", "--members", "--offsets") == (
        0,
        lines(header, "", *members, "", *offsets),
        "",
    )
    # Kafka's forms: --group (repeatable), --members --verbose.
    assert kip848(s, "groups", "describe", "--group", "shop", "--members", "--verbose") == (
        0,
        lines("GROUP shop", "", *verbose),
        "",
    )
    assert kip848(s, "groups", "describe", "shop", "--group", "shop", "--verbose") == (
        0,
        lines(header, "", *verbose),
        "",
    )
    # An offsets-only group has no members and is not a consumer group, but it is shown.
    assert kip848(s, "groups", "describe", "audit", "--state", "--offsets") == (
        0,
        lines(
            "GROUP audit  type classic  state Empty  (no consumer-protocol members)",
            "",
            "TOPIC     PARTITION  COMMITTED-OFFSET  LEADER-EPOCH  METADATA  MEMBER  HOST  CLIENT",
            "payments  1          7                 -             -         -       -     -",
        ),
        "",
    )


def test_groups_describe_json(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    code, out, err = kip848(
        s, "groups", "describe", "shop", "--offsets", "--state", "--output", "json"
    )
    parts = [{"topic_id": shop["orders"], "topic_name": "orders", "partitions": [0, 1, 2]}]
    owner = {"member_id": "A", "client_host": "/127.0.0.1", "client_id": "shop-app"}
    assert (code, err) == (0, "")
    assert json.loads(out) == [
        {
            "group_id": "shop",
            "group_type": "consumer",
            "error": None,
            "group_uid": shop["uid"],
            "group_state": "Stable",
            "group_epoch": 1,
            "assignment_epoch": 1,
            "assignor_name": "uniform",
            "member_count": 1,
            "offsets": [
                {
                    "topic": "orders",
                    "partition": 0,
                    "committed_offset": 42,
                    "log_end_offset": None,  # no upstream: no logs
                    "lag": None,
                    "committed_leader_epoch": -1,
                    "metadata": "m1",
                    **owner,
                },
                {
                    "topic": "orders",
                    "partition": 1,
                    "committed_offset": None,
                    "log_end_offset": None,  # no upstream: no logs
                    "lag": None,
                    "committed_leader_epoch": None,
                    "metadata": None,
                    **owner,
                },
                {
                    "topic": "orders",
                    "partition": 2,
                    "committed_offset": None,
                    "log_end_offset": None,  # no upstream: no logs
                    "lag": None,
                    "committed_leader_epoch": None,
                    "metadata": None,
                    **owner,
                },
            ],
        }
    ]
    code, out, _err = kip848(s, "groups", "describe", "shop", "--members", "--output", "json")
    assert json.loads(out) == [
        {
            "group_id": "shop",
            "error": None,
            "members": [
                {
                    "member_id": "A",
                    "instance_id": None,
                    "rack_id": None,
                    "member_epoch": 1,
                    "client_id": "shop-app",
                    "client_host": "/127.0.0.1",
                    "subscribed_topic_names": ["orders"],
                    "subscribed_topic_regex": None,
                    "assignment": parts,
                    "target_assignment": parts,
                    "member_type": 1,
                }
            ],
        }
    ]


def test_groups_describe_unknown_group(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    assert kip848(manual_server, "groups", "describe", "shop", "nope", "--state") == (
        1,
        lines(
            f"GROUP shop  uid {shop['uid']}  state Stable  epoch 1  assignment epoch 1  assignor uniform  members 1",
        ),
        lines(
            "kip848: group nope: GROUP_ID_NOT_FOUND: Group nope not found.",
            "  hint: see the groups the coordinator knows with `kip848 groups list`",
        ),
    )


def test_describe_answers_every_group_in_the_same_json_shape(
    manual_server: ServerProcess, shop: dict[str, str]
) -> None:
    """Found, offsets-only and missing groups: the same keys, None where there is no value; the
    missing one carries its error (and is reported on stderr, exit 1), as delete does."""
    code, out, err = kip848(
        manual_server, "groups", "describe", "shop", "audit", "nope", "--state", "--output", "json"
    )
    none = dict.fromkeys(
        ("group_uid", "group_state", "group_epoch", "assignment_epoch", "assignor_name")
    )
    assert (code, err) == (
        1,
        lines(
            "kip848: group nope: GROUP_ID_NOT_FOUND: Group nope not found.",
            "  hint: see the groups the coordinator knows with `kip848 groups list`",
        ),
    )
    assert json.loads(out) == [
        {
            "group_id": "shop",
            "group_type": "consumer",
            "error": None,
            "group_uid": shop["uid"],
            "group_state": "Stable",
            "group_epoch": 1,
            "assignment_epoch": 1,
            "assignor_name": "uniform",
            "member_count": 1,
        },
        {
            "group_id": "audit",
            "group_type": "classic",
            "error": None,
            **none,
            "group_state": "Empty",
            "member_count": 0,
        },
        {
            "group_id": "nope",
            "group_type": None,
            "error": "GROUP_ID_NOT_FOUND: Group nope not found.",
            **none,
            "member_count": 0,
        },
    ]
    code, out, _err = kip848(
        manual_server, "groups", "describe", "--group", "nope", "--offsets", "--output", "json"
    )
    assert (code, json.loads(out)) == (
        1,
        [
            {
                "group_id": "nope",
                "error": "GROUP_ID_NOT_FOUND: Group nope not found.",
                "offsets": [],
            }
        ],
    )
    code, out, _err = kip848(
        manual_server, "groups", "delete", "--group", "nope", "--output", "json"
    )
    assert (code, json.loads(out)) == (
        1,
        [{"group_id": "nope", "error": "GROUP_ID_NOT_FOUND: Group nope not found."}],
    )


def test_describe_all_groups(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    _code, out, _err = kip848(s, "groups", "list", "--state", "--output", "json")
    everything = sorted(g["group_id"] for g in json.loads(out))
    assert {"audit", "shop"} <= set(everything)
    code, out, err = kip848(s, "groups", "describe", "--all-groups", "--state", "--output", "json")
    assert (code, err) == (0, "")
    described = json.loads(out)
    assert [g["group_id"] for g in described] == everything
    assert all(g["error"] is None for g in described)
    code, out, _err = kip848(s, "groups", "describe", "--all-groups", "--state")
    assert code == 0
    assert [line.split()[1] for line in out.splitlines() if line.startswith("GROUP ")] == everything


def test_reset_offsets_at_the_edge_of_int64(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("edge", 1)
    top = 2**63 - 1
    assert kip848(
        s,
        "groups",
        "reset-offsets",
        "--group",
        "g-edge",
        "--topic",
        "edge",
        "--to-offset",
        str(top),
        "--execute",
    ) == (
        0,
        lines(
            "GROUP   TOPIC  PARTITION  CURRENT-OFFSET  NEW-OFFSET           STATUS",
            f"g-edge  edge   0          -               {top}  reset",
        ),
        "",
    )
    assert offsets_of(s, "g-edge") == {("edge", 0): top}
    assert kip848(s, "groups", "reset-offsets", "g-edge", "--topic", "edge", "--shift-by", "1") == (
        2,
        "",
        lines(
            f"kip848 groups: reset-offsets: edge-0 at {top} shifted by 1 passes the largest "
            f"offset ({top})"
        ),
    )
    assert offsets_of(s, "g-edge") == {("edge", 0): top}


def test_reset_offsets_is_refused_on_an_active_group(
    manual_server: ServerProcess, shop: dict[str, str]
) -> None:
    s = manual_server
    assert kip848(
        s, "groups", "reset-offsets", "shop", "--topic", "orders", "--to-offset", "0", "--execute"
    ) == (
        1,
        "",
        lines(
            "kip848: cannot reset the offsets of group 'shop': it is Stable with 1 member(s). Offsets can be reset only "
            "while the group is inactive (Empty), as in Kafka.",
            "  hint: stop the group's consumers (they leave, or their session times out), check with "
            "`kip848 groups describe shop --state`, then run this again",
        ),
    )
    assert offsets_of(s, "shop") == {("orders", 0): 42}


def test_reset_offsets_dry_run_execute_shift_and_file(
    manual_server: ServerProcess, tmp_path: Path
) -> None:
    s = manual_server
    s.create_topic("rs", 4)
    commit(s, "g-rs", {("rs", 0): 10, ("rs", 1): 20})
    plan = (
        "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  NEW-OFFSET",
        "g-rs   rs     0          10              5",
        "g-rs   rs     1          20              5",
        "g-rs   rs     2          -               5",
        "g-rs   rs     3          -               5",
    )
    assert kip848(s, "groups", "reset-offsets", "g-rs", "--topic", "rs", "--to-offset", "5") == (
        0,
        lines(*plan, "Dry run (the default; add --execute to apply): nothing was changed."),
        "",
    )
    assert kip848(
        s, "groups", "reset-offsets", "g-rs", "--topic", "rs", "--to-offset", "5", "--dry-run"
    ) == (0, lines(*plan, "Dry run: nothing was changed."), "")
    assert offsets_of(s, "g-rs") == {("rs", 0): 10, ("rs", 1): 20}
    assert kip848(
        s, "groups", "reset-offsets", "g-rs", "--topic", "rs:1-2", "--to-offset", "5", "--execute"
    ) == (
        0,
        lines(
            "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  NEW-OFFSET  STATUS",
            "g-rs   rs     1          20              5           reset",
            "g-rs   rs     2          -               5           reset",
        ),
        "",
    )
    assert offsets_of(s, "g-rs") == {("rs", 0): 10, ("rs", 1): 5, ("rs", 2): 5}
    # --shift-by moves committed offsets (floor 0); it refuses partitions with nothing to shift.
    code, out, err = kip848(
        s,
        "groups",
        "reset-offsets",
        "g-rs",
        "--all-topics",
        "--shift-by",
        "-7",
        "--execute",
        "--output",
        "json",
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "group_id": "g-rs",
        "executed": True,
        "partitions": [
            {
                "group_id": "g-rs",
                "topic": "rs",
                "partition": 0,
                "current_offset": 10,
                "new_offset": 3,
                "error": None,
            },
            {
                "group_id": "g-rs",
                "topic": "rs",
                "partition": 1,
                "current_offset": 5,
                "new_offset": 0,
                "error": None,
            },
            {
                "group_id": "g-rs",
                "topic": "rs",
                "partition": 2,
                "current_offset": 5,
                "new_offset": 0,
                "error": None,
            },
        ],
    }
    assert kip848(s, "groups", "reset-offsets", "g-rs", "--topic", "rs:2,3", "--shift-by", "1") == (
        1,
        "",
        lines(
            "kip848: cannot shift partitions without a committed offset: rs-3",
            "  hint: set them with --to-offset N (or a --from-file CSV) instead",
        ),
    )
    csv = tmp_path / "offsets.csv"
    csv.write_text("topic,partition,offset\n# from the last backup\nrs,3,33\nrs,0,30\n")
    assert kip848(s, "groups", "reset-offsets", "g-rs", "--from-file", str(csv), "--execute") == (
        0,
        lines(
            "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  NEW-OFFSET  STATUS",
            "g-rs   rs     0          3               30          reset",
            "g-rs   rs     3          -               33          reset",
        ),
        "",
    )
    assert offsets_of(s, "g-rs") == {("rs", 0): 30, ("rs", 1): 0, ("rs", 2): 0, ("rs", 3): 33}
    # A group that does not exist yet: the reset creates it (offsets only), as in Kafka.
    assert (
        kip848(
            s,
            "groups",
            "reset-offsets",
            "g-rs-new",
            "--topic",
            "rs:0",
            "--to-offset",
            "1",
            "--execute",
        )[0]
        == 0
    )
    assert offsets_of(s, "g-rs-new") == {("rs", 0): 1}


def test_reset_offsets_errors(manual_server: ServerProcess, tmp_path: Path) -> None:
    s = manual_server
    assert kip848(
        s, "groups", "reset-offsets", "g-x", "--topic", "no-such", "--to-offset", "1"
    ) == (
        1,
        "",
        lines(
            "kip848: topic no-such: UNKNOWN_TOPIC_OR_PARTITION: The topic 'no-such' does not exist.",
            "  hint: see the registered topics and their partition counts with `kip848 topics list`",
        ),
    )
    s.create_topic("rs-err", 1)
    assert kip848(
        s,
        "groups",
        "reset-offsets",
        "g-x",
        "--topic",
        "rs-err:0,4",
        "--to-offset",
        "1",
        "--execute",
    ) == (
        1,
        lines(
            "GROUP  TOPIC   PARTITION  CURRENT-OFFSET  NEW-OFFSET  STATUS",
            "g-x    rs-err  0          -               1           reset",
            "g-x    rs-err  4          -               1           UNKNOWN_TOPIC_OR_PARTITION: Partition rs-err-4 does not exist.",
        ),
        lines(
            "kip848: reset rs-err-4: UNKNOWN_TOPIC_OR_PARTITION: Partition rs-err-4 does not exist.",
            "  hint: see the registered topics and their partition counts with `kip848 topics list`",
        ),
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("rs-err,0\n")
    assert kip848(s, "groups", "reset-offsets", "g-x", "--from-file", str(bad)) == (
        2,
        "",
        lines(f"kip848 groups: {bad}:1: expected topic,partition,offset, got 'rs-err,0'"),
    )
    assert kip848(s, "groups", "reset-offsets", "g-x", "--to-offset", "1") == (
        2,
        "",
        lines(
            "kip848 groups: reset-offsets: name the partitions with --topic T[:P] (repeatable), --all-topics, or --from-file"
        ),
    )
    assert kip848(
        s, "groups", "reset-offsets", "g-x", "--topic", "rs-err:a", "--to-offset", "1"
    ) == (
        2,
        "",
        lines("kip848 groups: --topic 'rs-err:a': partitions are numbers, e.g. rs-err:0,2,4-7"),
    )


def test_delete_offsets(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    assert kip848(s, "groups", "delete-offsets", "shop", "--topic", "orders:0") == (
        1,
        lines(
            "TOPIC   PARTITION  STATUS",
            "orders  0          GROUP_SUBSCRIBED_TO_TOPIC",
        ),
        lines(
            "kip848: delete offset orders-0: GROUP_SUBSCRIBED_TO_TOPIC: The group is subscribed to topic orders.",
            "  hint: members still subscribe to this topic; only offsets of topics the group no longer subscribes to can be deleted",
        ),
    )
    assert kip848(
        s, "groups", "delete-offsets", "audit", "--topic", "payments", "--output", "json"
    ) == (
        0,
        json.dumps(
            {
                "group_id": "audit",
                "partitions": [
                    {"topic": "payments", "partition": 0, "error": None},
                    {"topic": "payments", "partition": 1, "error": None},
                ],
            },
            indent=2,
        )
        + "\n",
        "",
    )
    assert offsets_of(s, "audit") == {}
    assert kip848(s, "groups", "delete-offsets", "nope", "--topic", "payments:0") == (
        1,
        "",
        lines(
            "kip848: delete offsets of group nope: GROUP_ID_NOT_FOUND: Group nope not found.",
            "  hint: see the groups the coordinator knows with `kip848 groups list`",
        ),
    )


def test_delete_groups(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    s.create_topic("del-cli", 1)
    commit(s, "g-del-cli", {("del-cli", 0): 1})
    assert kip848(s, "groups", "delete", "g-del-cli", "shop", "nope") == (
        1,
        lines(
            "Deleted group g-del-cli (and its committed offsets).",
        ),
        lines(
            "kip848: delete group shop: NON_EMPTY_GROUP: Group shop is not empty (1 members).",
            "kip848: delete group nope: GROUP_ID_NOT_FOUND: Group nope not found.",
            "  hint: the group still has members; stop its consumers (they leave, or their session times out) and retry",
            "  hint: see the groups the coordinator knows with `kip848 groups list`",
        ),
    )
    assert offsets_of(s, "g-del-cli") == {}
    commit(s, "g-del-cli-2", {("del-cli", 0): 1})
    assert kip848(s, "groups", "delete", "g-del-cli-2", "--output", "json") == (
        0,
        json.dumps([{"group_id": "g-del-cli-2", "error": None}], indent=2) + "\n",
        "",
    )


def test_validate_regex(manual_server: ServerProcess, shop: dict[str, str]) -> None:
    s = manual_server
    assert kip848(s, "groups", "validate-regex", "pay.*|ord.*") == (
        0,
        lines(
            "The regular expression `pay.*|ord.*` is valid (RE2 syntax, full match).",
            "It matches 2 of the registered topics:",
            "  orders",
            "  payments",
        ),
        "",
    )
    assert kip848(s, "groups", "validate-regex", "order", "--output", "json") == (
        0,
        json.dumps({"pattern": "order", "valid": True, "matched_topics": []}, indent=2) + "\n",
        "",
    )
    code, out, err = kip848(s, "groups", "validate-regex", "(a)\\1")
    assert (code, out) == (1, "")
    assert err == lines(
        "kip848: validate-regex: INVALID_REGULAR_EXPRESSION: SubscribedTopicRegex `(a)\\1` is not a valid regular "
        "expression: invalid escape sequence: \\1.",
        "  hint: patterns use RE2 syntax (like Java's, without backreferences or lookaround) and must match the "
        "whole topic name",
    )


def test_configs_describe_and_alter(manual_server: ServerProcess) -> None:
    s = manual_server
    assert kip848(s, "configs", "describe", "--group", "g-conf") == (
        0,
        lines(
            "NAME                             VALUE  SOURCE",
            "consumer.session.timeout.ms      45000  server default",
            "consumer.heartbeat.interval.ms   5000   server default",
            "consumer.assignment.interval.ms  0      server default",
        ),
        "",
    )
    assert kip848(
        s,
        "configs",
        "alter",
        "--group",
        "g-conf",
        "--add-config",
        "consumer.heartbeat.interval.ms=6000,consumer.session.timeout.ms=50000",
    ) == (
        0,
        lines(
            "Altered configs of group g-conf: consumer.heartbeat.interval.ms=6000, consumer.session.timeout.ms=50000. "
            "Members see the change on their next heartbeat.",
        ),
        "",
    )
    assert kip848(
        s,
        "configs",
        "alter",
        "--group",
        "g-conf",
        "--delete-config",
        "consumer.session.timeout.ms",
        "--validate-only",
    ) == (
        0,
        lines(
            "Validated (nothing changed) configs of group g-conf: consumer.session.timeout.ms (back to the server default). "
            "Members see the change on their next heartbeat.",
        ),
        "",
    )
    code, out, err = kip848(s, "configs", "describe", "--group", "g-conf", "--output", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "group_id": "g-conf",
        "configs": [
            {
                "name": "consumer.session.timeout.ms",
                "value": "50000",
                "source": "group override",
                "documentation": "The timeout to detect client failures when using the consumer group protocol.",
            },
            {
                "name": "consumer.heartbeat.interval.ms",
                "value": "6000",
                "source": "group override",
                "documentation": "The heartbeat interval given to the members of a consumer group.",
            },
            {
                "name": "consumer.assignment.interval.ms",
                "value": "0",
                "source": "server default",
                "documentation": "",
            },
        ],
    }
    assert kip848(
        s,
        "configs",
        "alter",
        "--group",
        "g-conf",
        "--add-config",
        "consumer.heartbeat.interval.ms=60000",
    ) == (
        1,
        "",
        lines(
            "kip848: alter configs of group g-conf: INVALID_CONFIG: invalid value 60000 for "
            "'consumer.heartbeat.interval.ms': must be between 5000 and 15000",
            "  hint: group configs: consumer.session.timeout.ms and consumer.heartbeat.interval.ms, within the server's "
            "group.consumer.min/max.* bounds, heartbeat interval below the session timeout",
        ),
    )
    assert kip848(s, "configs", "alter", "--group", "g-conf") == (
        2,
        "",
        lines(
            "kip848 configs: configs alter: give --add-config NAME=VALUE and/or --delete-config NAME"
        ),
    )


def test_the_new_member_resumes_after_a_reset(manual_server: ServerProcess) -> None:
    """The operator's story: consumers stop, offsets are rewound, a consumer comes back and
    resumes from the rewound offsets."""
    s = manual_server
    t = s.create_topic("story", 1)
    a = s.heartbeat(**join_request("g-story", ["story"], member_id="A"))
    commit(s, "g-story", {("story", 0): 500}, epoch=a.member_epoch, member_id="A")
    s.heartbeat(group_id="g-story", member_id="A", member_epoch=-1)
    assert (
        kip848(
            s,
            "groups",
            "reset-offsets",
            "g-story",
            "--topic",
            "story",
            "--shift-by",
            "-100",
            "--execute",
        )[0]
        == 0
    )
    b = s.heartbeat(**join_request("g-story", ["story"], member_id="B"))
    got = offsets_pb2_grpc.OffsetServiceStub(s.channel).OffsetFetch(
        OF(
            groups=[
                OF.Group(
                    group_id="g-story",
                    member_id="B",
                    member_epoch=b.member_epoch,
                    topics=common_pb2.TopicPartitionIndexesList(
                        items=[
                            common_pb2.TopicPartitionIndexes(name="story", partition_indexes=[0])
                        ]
                    ),
                )
            ]
        ),
        timeout=10,
    )
    assert [
        (p.partition_index, p.committed_offset) for p in got.groups[0].topics[0].partitions
    ] == [(0, 400)]
    assert got.groups[0].topics[0].topic_id == t


def test_unreachable_server() -> None:
    code, out, err = kip848(None, "groups", "list", "--timeout", "2")
    assert (code, out) == (1, "")
    assert err.startswith("kip848: 127.0.0.1:1: UNAVAILABLE: ")
    assert err.endswith(
        "  hint: is `kip848 serve` running and listening on 127.0.0.1:1? (--bootstrap-server HOST:PORT)\n"
    )
