"""The wire contract: generated code is up to date, and the .proto files say what
docs/proto.md binds (services, RPCs, field names, optional presence, error conventions).

A failure in ``test_generated_code_is_up_to_date`` means a .proto changed without
regenerating: run ``.venv/bin/python scripts/gen_proto.py`` and commit the result.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kip848.v1 import (
    admin_pb2,
    classic_group_pb2,
    common_pb2,
    consumer_group_pb2,
    offsets_pb2,
    testing_pb2,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_proto.py"
PROTO_DIR = REPO / "proto" / "kip848" / "v1"
MODULES = {
    "common": common_pb2,
    "consumer_group": consumer_group_pb2,
    "classic_group": classic_group_pb2,
    "offsets": offsets_pb2,
    "admin": admin_pb2,
    "testing": testing_pb2,
}
PACKAGE = "kip848.v1"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def message(name: str) -> Descriptor:
    return descriptor_pool.Default().FindMessageTypeByName(f"{PACKAGE}.{name}")


def all_messages() -> list[Descriptor]:
    found: list[Descriptor] = []

    def walk(descriptor: Descriptor) -> None:
        found.append(descriptor)
        for nested in descriptor.nested_types:
            walk(nested)

    for module in MODULES.values():
        for descriptor in module.DESCRIPTOR.message_types_by_name.values():
            walk(descriptor)
    return found


# --- generated code ----------------------------------------------------------------------


def test_generated_code_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_mode_detects_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    script = load_script()
    shutil.copytree(REPO / "proto", tmp_path / "proto")
    out_root = tmp_path / "client" / "src"
    shutil.copytree(REPO / "client" / "src", out_root)
    generated = out_root / "kip848" / "v1"
    edited = generated / "common_pb2.py"
    edited.write_text(edited.read_text() + "# hand edit\n")
    (generated / "offsets_pb2.pyi").unlink()
    (generated / "gone_pb2.py").write_text("# from a deleted .proto\n")
    monkeypatch.setattr(script, "REPO", tmp_path)
    monkeypatch.setattr(script, "PROTO_ROOT", tmp_path / "proto")
    monkeypatch.setattr(script, "PACKAGE_DIR", tmp_path / "proto" / "kip848")
    monkeypatch.setattr(script, "OUT_ROOT", out_root)

    assert script.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "changed: client/src/kip848/v1/common_pb2.py" in out
    assert "missing: client/src/kip848/v1/offsets_pb2.pyi" in out
    assert "stale: client/src/kip848/v1/gone_pb2.py" in out

    assert script.main([]) == 0  # write mode repairs all three
    assert not (generated / "gone_pb2.py").exists()
    assert (generated / "offsets_pb2.pyi").read_bytes() == (
        REPO / "client" / "src" / "kip848" / "v1" / "offsets_pb2.pyi"
    ).read_bytes()
    assert script.main(["--check"]) == 0
    assert not list((tmp_path / "proto").rglob("*.py*")), "nothing is generated beside the .proto"


def test_script_refuses_other_generator_versions(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    script = load_script()
    monkeypatch.setitem(script.PINS, "grpcio-tools", "0.0.1")
    assert script.main(["--check"]) == 2
    err = capsys.readouterr().err
    assert "refusing to generate" in err and "grpcio-tools==0.0.1" in err


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_layout(name: str) -> None:
    module = MODULES[name]
    assert module.DESCRIPTOR.name == f"kip848/v1/{name}.proto"
    assert module.DESCRIPTOR.package == PACKAGE
    assert module.__name__ == f"kip848.v1.{name}_pb2"
    importlib.import_module(f"kip848.v1.{name}_pb2_grpc")


# --- services ----------------------------------------------------------------------------

SERVICES = {
    "ConsumerGroupService": ("consumer_group", ["ConsumerGroupHeartbeat", "ConsumerGroupDescribe"]),
    "ClassicGroupService": (
        "classic_group",
        ["FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups"],
    ),
    "OffsetService": ("offsets", ["OffsetCommit", "OffsetFetch", "OffsetDelete"]),
    "AdminService": (
        "admin",
        [
            "ListGroups",
            "DeleteGroups",
            "DescribeConfigs",
            "IncrementalAlterConfigs",
            "CreateTopics",
            "CreatePartitions",
            "DeleteTopics",
            "ListTopics",
            "ListOffsets",
        ],
    ),
    "TestingService": ("testing", ["AdvanceTime"]),
}


EXTENSIONS = {
    "ConsumerGroupService": ["ConsumerGroupWatch"],
    "AdminService": [
        "DescribeAcls",
        "CreateAcls",
        "DeleteAcls",
        "DescribeUserScramCredentials",
        "AlterUserScramCredentials",
        "DescribeCluster",
    ],
}
"""RPCs added to the binding contract's first version (docs/proto.md; added, never changing
what it binds)."""


def test_the_push_stream_is_the_one_server_streaming_rpc() -> None:
    service = MODULES["consumer_group"].DESCRIPTOR.services_by_name["ConsumerGroupService"]
    method = service.methods_by_name["ConsumerGroupWatch"]
    assert (method.client_streaming, method.server_streaming) == (False, True)
    assert method.input_type.full_name == f"{PACKAGE}.ConsumerGroupWatchRequest"
    assert method.output_type.full_name == f"{PACKAGE}.ConsumerGroupWatchResponse"
    streaming = [
        m.full_name
        for module in MODULES.values()
        for svc in module.DESCRIPTOR.services_by_name.values()
        for m in svc.methods
        if m.client_streaming or m.server_streaming
    ]
    assert streaming == [method.full_name]


@pytest.mark.parametrize("service_name", sorted(SERVICES))
def test_service_has_the_api_rpcs(service_name: str) -> None:
    module_name, rpcs = SERVICES[service_name]
    service = MODULES[module_name].DESCRIPTOR.services_by_name[service_name]
    assert service.full_name == f"{PACKAGE}.{service_name}"
    assert set(rpcs) <= set(service.methods_by_name), "an RPC listed in docs/proto.md is missing"
    for rpc in rpcs:
        method = service.methods_by_name[rpc]
        assert method.input_type.full_name == f"{PACKAGE}.{rpc}Request"
        assert method.output_type.full_name == f"{PACKAGE}.{rpc}Response"
        assert not method.client_streaming and not method.server_streaming
    grpc_module = importlib.import_module(f"kip848.v1.{module_name}_pb2_grpc")
    for attr in (
        f"{service_name}Stub",
        f"{service_name}Servicer",
        f"add_{service_name}Servicer_to_server",
    ):
        assert hasattr(grpc_module, attr), attr


# --- fields named by docs/proto.md ----------------------------------------------------------
# Spec per field: "?name" must have presence (proto3 `optional`); "name[]" is repeated (else
# singular); "name:bytes" / "name:int64" checks the type. Fields docs/proto.md does not mark
# optional are only checked for existence and cardinality.

FIELDS = {
    # common.proto
    "TopicPartitions": "topic_id:bytes partitions[] topic_name",
    "TopicPartitionsList": "items[]",
    "TopicNames": "names[]",
    "TopicPartitionIndexes": "name topic_id:bytes partition_indexes[]",
    "TopicPartitionIndexesList": "items[]",
    # consumer_group.proto
    "ConsumerGroupHeartbeatRequest": (
        "group_id member_id member_epoch ?instance_id ?rack_id ?rebalance_timeout_ms "
        "?subscribed_topic_names ?subscribed_topic_regex ?server_assignor ?topic_partitions"
    ),
    "ConsumerGroupHeartbeatResponse": (
        "error_code ?error_message ?member_id member_epoch heartbeat_interval_ms ?assignment "
        "should_compute_assignment"
    ),
    "Assignment": "assigned_topic_partitions[] pending_topic_partitions[]",
    "ConsumerGroupWatchRequest": "group_id member_id",
    "ConsumerGroupWatchResponse": (
        "error_code ?error_message member_epoch assignment_epoch target_topic_partitions[] "
        "released_topic_partitions[] group_epoch"
    ),
    "ConsumerGroupDescribeRequest": "group_ids[] include_authorized_operations",
    "ConsumerGroupDescribeResponse": "groups[]",
    "ConsumerGroupDescribeResponse.DescribedGroup": (
        "error_code ?error_message group_id group_uid group_state group_epoch assignment_epoch "
        "assignor_name members[]"
    ),
    "ConsumerGroupDescribeResponse.Member": (
        "member_id instance_id rack_id member_epoch client_id client_host "
        "subscribed_topic_names[] subscribed_topic_regex assignment target_assignment member_type"
    ),
    "ConsumerGroupDescribeResponse.MemberAssignment": "topic_partitions[]",
    # classic_group.proto
    "FindCoordinatorRequest": "key_type coordinator_keys[]",
    "FindCoordinatorResponse": "coordinators[]",
    "FindCoordinatorResponse.Coordinator": "key node_id host port error_code ?error_message",
    "JoinGroupRequest": (
        "group_id session_timeout_ms ?rebalance_timeout_ms member_id ?group_instance_id "
        "protocol_type protocols[] ?reason"
    ),
    "JoinGroupRequest.Protocol": "name metadata:bytes",
    "JoinGroupResponse": (
        "error_code generation_id ?protocol_type ?protocol_name leader skip_assignment member_id "
        "members[]"
    ),
    "JoinGroupResponse.Member": "member_id ?group_instance_id metadata:bytes",
    "SyncGroupRequest": (
        "group_id generation_id member_id ?group_instance_id ?protocol_type ?protocol_name "
        "assignments[]"
    ),
    "SyncGroupRequest.Assignment": "member_id assignment:bytes",
    "SyncGroupResponse": "error_code ?protocol_type ?protocol_name assignment:bytes",
    "HeartbeatRequest": "group_id generation_id member_id ?group_instance_id",
    "HeartbeatResponse": "error_code",
    "LeaveGroupRequest": "group_id members[]",
    "LeaveGroupRequest.MemberIdentity": "member_id ?group_instance_id ?reason",
    "LeaveGroupResponse": "error_code members[]",
    "LeaveGroupResponse.MemberResponse": "member_id group_instance_id error_code",
    "DescribeGroupsRequest": "group_ids[]",
    "DescribeGroupsResponse": "groups[]",
    "DescribeGroupsResponse.DescribedGroup": (
        "error_code group_id group_state protocol_type protocol_data members[] generation_id"
    ),
    "DescribeGroupsResponse.Member": (
        "member_id group_instance_id client_id client_host member_metadata:bytes "
        "member_assignment:bytes"
    ),
    # offsets.proto
    "OffsetCommitRequest": (
        "group_id ?generation_id_or_member_epoch member_id ?group_instance_id topics[]"
    ),
    "OffsetCommitRequest.Topic": "name topic_id:bytes partitions[]",
    "OffsetCommitRequest.Partition": (
        "partition_index committed_offset:int64 ?committed_leader_epoch ?committed_metadata"
    ),
    "OffsetCommitResponse": "topics[]",
    "OffsetCommitResponse.Topic": "name topic_id:bytes partitions[]",
    "OffsetCommitResponse.Partition": "partition_index error_code",
    "OffsetFetchRequest": "groups[] require_stable",
    "OffsetFetchRequest.Group": "group_id ?member_id ?member_epoch ?topics",
    "OffsetFetchResponse": "groups[]",
    "OffsetFetchResponse.Group": "group_id error_code topics[]",
    "OffsetFetchResponse.Topic": "name topic_id:bytes partitions[]",
    "OffsetFetchResponse.Partition": (
        "partition_index committed_offset:int64 committed_leader_epoch ?metadata error_code"
    ),
    "OffsetDeleteRequest": "group_id topics[]",
    "OffsetDeleteRequest.Topic": "name partition_indexes[]",
    "OffsetDeleteResponse": "error_code topics[]",
    "OffsetDeleteResponse.Topic": "name partitions[]",
    "OffsetDeleteResponse.Partition": "partition_index error_code",
    # admin.proto
    "ListGroupsRequest": "states_filter[] types_filter[]",
    "ListGroupsResponse": "error_code groups[]",
    "ListGroupsResponse.ListedGroup": "group_id protocol_type group_state group_type",
    "DeleteGroupsRequest": "group_ids[]",
    "DeleteGroupsResponse": "results[]",
    "DeleteGroupsResponse.DeletableGroupResult": "group_id error_code",
    "DescribeConfigsRequest": "resources[] include_synonyms include_documentation",
    "DescribeConfigsRequest.Resource": "resource_type resource_name ?configuration_keys",
    "DescribeConfigsResponse": "results[]",
    "DescribeConfigsResponse.Result": (
        "error_code ?error_message resource_type resource_name configs[]"
    ),
    "DescribeConfigsResponse.Config": (
        "name ?value read_only config_source is_sensitive synonyms[] config_type ?documentation"
    ),
    "IncrementalAlterConfigsRequest": "resources[] validate_only",
    "IncrementalAlterConfigsRequest.Resource": "resource_type resource_name configs[]",
    "IncrementalAlterConfigsRequest.AlterableConfig": "name config_operation ?value",
    "IncrementalAlterConfigsResponse": "responses[]",
    "IncrementalAlterConfigsResponse.AlterConfigsResourceResponse": (
        "error_code ?error_message resource_type resource_name"
    ),
    "CreateTopicsRequest": "topics[]",
    "CreateTopicsRequest.CreatableTopic": "name num_partitions ?topic_id:bytes",
    "CreateTopicsResponse": "topics[]",
    "CreateTopicsResponse.CreatableTopicResult": "name topic_id:bytes error_code ?error_message",
    "CreatePartitionsRequest": "topics[]",
    "CreatePartitionsRequest.CreatePartitionsTopic": "name count",
    "CreatePartitionsResponse": "results[]",
    "CreatePartitionsResponse.CreatePartitionsTopicResult": "name error_code ?error_message",
    "DeleteTopicsRequest": "names[]",
    "DeleteTopicsResponse": "results[]",
    "DeleteTopicsResponse.DeletableTopicResult": "name topic_id:bytes error_code ?error_message",
    "ListTopicsRequest": "",
    "ListTopicsResponse": "topics[]",
    "ListTopicsResponse.Topic": "name topic_id:bytes num_partitions",
    "DescribeClusterRequest": "",
    "DescribeClusterResponse": "error_code ?error_message controller_id nodes[]",
    "DescribeClusterResponse.Node": "node_id host port",
    "ListOffsetsRequest": "isolation_level topics[]",
    "ListOffsetsRequest.Topic": "name partitions[]",
    "ListOffsetsRequest.Partition": "partition_index timestamp:int64",
    "ListOffsetsResponse": "error_code ?error_message topics[]",
    "ListOffsetsResponse.Topic": "name partitions[]",
    "ListOffsetsResponse.Partition": (
        "partition_index error_code ?error_message timestamp:int64 offset:int64 leader_epoch"
    ),
    # testing.proto
    "AdvanceTimeRequest": "ms",
    "AdvanceTimeResponse": "now_ms",
}

TYPES = {"bytes": FieldDescriptor.TYPE_BYTES, "int64": FieldDescriptor.TYPE_INT64}


def field_cases() -> list[tuple[str, str]]:
    return [(msg, spec) for msg, specs in FIELDS.items() for spec in specs.split()]


@pytest.mark.parametrize(("message_name", "spec"), field_cases())
def test_api_field_exists(message_name: str, spec: str) -> None:
    m = re.fullmatch(r"(\??)([a-z_]+)(\[\])?(?::(\w+))?", spec)
    assert m, f"bad spec {spec!r}"
    optional, name, repeated, type_name = m.groups()
    descriptor = message(message_name)
    assert name in descriptor.fields_by_name, f"{message_name}.{name} is missing"
    field = descriptor.fields_by_name[name]
    is_repeated = field.is_repeated
    assert is_repeated == bool(repeated), f"{message_name}.{name}: repeated={is_repeated}"
    if optional:
        assert field.has_presence, f"{message_name}.{name} must be proto3 `optional`"
    if type_name:
        assert field.type == TYPES[type_name], f"{message_name}.{name} must be {type_name}"


def test_every_rpc_message_is_covered_by_the_table() -> None:
    # Keeps FIELDS honest: a new request/response message gets a row.
    for _module_name, rpcs in SERVICES.values():
        for rpc in rpcs:
            assert f"{rpc}Request" in FIELDS and f"{rpc}Response" in FIELDS


# --- conventions ---------------------------------------------------------------------------


@pytest.mark.parametrize("descriptor", all_messages(), ids=lambda d: d.full_name)
def test_error_and_topic_id_conventions(descriptor: Descriptor) -> None:
    fields = descriptor.fields_by_name
    if descriptor.name.endswith("Response"):
        assert "error_code" in fields, "every response carries a request-level error_code"
    if "error_code" in fields:
        assert fields["error_code"].type == FieldDescriptor.TYPE_INT32
        assert "error_message" in fields, "error_code comes with optional error_message"
        assert fields["error_message"].type == FieldDescriptor.TYPE_STRING
        assert fields["error_message"].has_presence
    for field in descriptor.fields:
        if field.name == "topic_id":
            assert field.type == FieldDescriptor.TYPE_BYTES


# Kafka's numbers as listed in docs/proto.md ("Error codes").
API_ERROR_CODES = {
    0: "NONE", -1: "UNKNOWN_SERVER_ERROR", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    12: "OFFSET_METADATA_TOO_LARGE", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 17: "INVALID_TOPIC_EXCEPTION",
    22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID", 26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS",
    30: "GROUP_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS", 42: "INVALID_REQUEST", 68: "NON_EMPTY_GROUP",
    69: "GROUP_ID_NOT_FOUND", 79: "MEMBER_ID_REQUIRED", 81: "GROUP_MAX_SIZE_REACHED",
    82: "FENCED_INSTANCE_ID", 86: "GROUP_SUBSCRIBED_TO_TOPIC", 100: "UNKNOWN_TOPIC_ID",
    110: "FENCED_MEMBER_EPOCH", 111: "UNRELEASED_INSTANCE_ID", 112: "UNSUPPORTED_ASSIGNOR",
    113: "STALE_MEMBER_EPOCH", 128: "INVALID_REGULAR_EXPRESSION",
}  # fmt: skip


def test_error_code_enum_has_the_api_codes() -> None:
    for number, name in API_ERROR_CODES.items():
        assert common_pb2.ErrorCode.Name(number) == name


def rpc_comments() -> list[tuple[str, str, list[str]]]:
    """(file, rpc, leading comment lines) for every rpc in the .proto sources."""
    result = []
    for path in sorted(PROTO_DIR.glob("*.proto")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"\s*rpc\s+(\w+)\s*\(", line)
            if not m:
                continue
            comment: list[str] = []
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("//"):
                comment.insert(0, lines[j].strip()[2:].strip())
                j -= 1
            result.append((path.name, m.group(1), comment))
    return result


@pytest.mark.parametrize(
    ("file", "rpc", "comment"), rpc_comments(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_rpc_documents_its_error_codes(file: str, rpc: str, comment: list[str]) -> None:
    assert comment and not comment[0].startswith("Errors"), "needs a semantics line first"
    assert any(line.startswith("Errors") for line in comment), "needs an Errors: list"
    listed = [re.match(r"(-?\d+) ([A-Z][A-Z_]+)\b", line) for line in comment]
    codes = [(int(m.group(1)), m.group(2)) for m in listed if m]
    assert (0, "NONE") in codes
    for number, name in codes:
        assert common_pb2.ErrorCode.Name(number) == name, f"{number} is not {name}"


def test_all_services_have_rpc_comments() -> None:
    documented = {rpc for _, rpc, _ in rpc_comments()}
    assert documented == {rpc for _, rpcs in SERVICES.values() for rpc in rpcs} | {
        rpc for rpcs in EXTENSIONS.values() for rpc in rpcs
    }


# --- behaviour: optional presence ---------------------------------------------------------


def roundtrip(msg):  # type: ignore[no-untyped-def]
    return type(msg).FromString(msg.SerializeToString())


def test_nullable_topic_names_distinguish_absent_from_empty() -> None:
    req = consumer_group_pb2.ConsumerGroupHeartbeatRequest(group_id="g", member_epoch=1)
    assert not req.HasField("subscribed_topic_names")
    assert not roundtrip(req).HasField("subscribed_topic_names")

    req.subscribed_topic_names.CopyFrom(common_pb2.TopicNames())
    assert req.HasField("subscribed_topic_names")
    again = roundtrip(req)
    assert again.HasField("subscribed_topic_names")
    assert list(again.subscribed_topic_names.names) == []

    req.ClearField("subscribed_topic_names")
    assert not req.HasField("subscribed_topic_names")


def test_nullable_owned_partitions_and_fetch_topics() -> None:
    join = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=0, topic_partitions=common_pb2.TopicPartitionsList()
    )
    assert roundtrip(join).HasField("topic_partitions")
    assert not roundtrip(consumer_group_pb2.ConsumerGroupHeartbeatRequest()).HasField(
        "topic_partitions"
    )

    all_topics = offsets_pb2.OffsetFetchRequest.Group(group_id="g")
    none_topics = offsets_pb2.OffsetFetchRequest.Group(
        group_id="g", topics=common_pb2.TopicPartitionIndexesList()
    )
    assert not roundtrip(all_topics).HasField("topics")
    assert roundtrip(none_topics).HasField("topics")


def test_optional_scalars_distinguish_absent_from_zero_and_empty() -> None:
    req = consumer_group_pb2.ConsumerGroupHeartbeatRequest()
    for name in (
        "rebalance_timeout_ms",
        "subscribed_topic_regex",
        "instance_id",
        "server_assignor",
    ):
        assert not req.HasField(name)
    req.rebalance_timeout_ms = 0
    req.subscribed_topic_regex = ""
    again = roundtrip(req)
    assert again.HasField("rebalance_timeout_ms") and again.rebalance_timeout_ms == 0
    assert again.HasField("subscribed_topic_regex") and again.subscribed_topic_regex == ""

    commit = offsets_pb2.OffsetCommitRequest(group_id="g")
    assert not commit.HasField("generation_id_or_member_epoch")
    commit.generation_id_or_member_epoch = -1
    assert roundtrip(commit).generation_id_or_member_epoch == -1


def test_assignment_presence_and_topic_id_bytes() -> None:
    topic_id = bytes(range(16))
    resp = consumer_group_pb2.ConsumerGroupHeartbeatResponse(member_epoch=3)
    assert not resp.HasField("assignment")
    resp.assignment.assigned_topic_partitions.add(topic_id=topic_id, partitions=[0, 2])
    again = roundtrip(resp)
    assert again.HasField("assignment")
    assert again.assignment.assigned_topic_partitions[0].topic_id == topic_id
    assert list(again.assignment.assigned_topic_partitions[0].partitions) == [0, 2]
    assert not again.HasField("error_message")
