"""``kip848`` configuration sources: Java properties files read in full, the strict
``--config-file``, a Kafka ``server.properties`` through ``--server-properties``, ``--set``, their
precedence, and values refused naming the setting and the type expected."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.cli.config import build_config, read_properties, read_properties_file
from coordinator.cli.errors import UsageError
from coordinator.core.config import GroupCoordinatorConfig

KAFKA_SERVER_PROPERTIES = Path(__file__).parent / "data" / "kafka-server.properties"


def test_the_java_properties_format(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_bytes(
        b"# comment\n"
        b"! also a comment\n"
        b"   # an indented comment\n"
        b"\n"
        b"a = 1\n"  # '=' with whitespace around it
        b"b:2\n"  # ':' separator
        b"c 3\n"  # whitespace separator
        b"d\t:\t4\n"  # whitespace then ':'
        b"e=one,\\\n"  # a continuation: leading whitespace of the next line dropped
        b"    two,\\\r\n"  # CRLF line ends too
        b"    three\n"
        b"f\\:g=h\\=i\n"  # escaped separators in key and value
        b"j=tab\\there\\nnewline\\\\backslash\n"
        b"k\\u0041=\\u00e9t\\u00E9\n"  # unicode escapes (key and value)
        b"l=\xe9\n"  # ISO-8859-1 bytes, as java.util.Properties.load(InputStream) reads them
        b"empty\n"  # a key alone: empty value
        b"a=last wins\n"
        b"m=trailing  "  # last line without a newline; trailing whitespace kept (Java does)
    )
    assert read_properties(str(path)) == {
        "a": "last wins",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "one,two,three",
        "f:g": "h=i",
        "j": "tab\there\nnewline\\backslash",
        "kA": "été",
        "l": "é",
        "empty": "",
        "m": "trailing  ",
    }
    lines = {name: s.origin for name, s in read_properties_file(str(path)).items()}
    assert lines == {
        "a": f"{path}:17",
        "b": f"{path}:6",
        "c": f"{path}:7",
        "d": f"{path}:8",
        "e": f"{path}:9",
        "f:g": f"{path}:12",
        "j": f"{path}:13",
        "kA": f"{path}:14",
        "l": f"{path}:15",
        "empty": f"{path}:16",
        "m": f"{path}:18",
    }


def test_a_malformed_unicode_escape_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("a=1\n\nb=\\u00zz\n")
    with pytest.raises(UsageError) as err:
        read_properties(str(path))
    assert str(err.value) == f"{path}:3: Invalid \\u escape sequence: \\u00zz"


def test_config_file_is_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.properties"
    path.write_text("group.coordinator.shards=2\n# fine so far\nlog.dirs=/tmp/kafka-logs\n")
    assert main(["serve", "--config-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kip848 serve: {path}:3: unknown configuration 'log.dirs' (known: "), err
    assert err.rstrip().endswith(
        ", and the listeners' and their security settings of docs/security.md; a Kafka "
        "server.properties goes to --server-properties, which ignores keys that are not "
        "the coordinator's)"
    )
    # The listeners and their security are the coordinator's settings too (docs/operations.md,
    # "Configuration"): a file naming them is taken.
    path.write_text("listeners=PLAINTEXT://127.0.0.1:0\ngroup.coordinator.shards=2\n")
    assert build_config(str(path), []).offsets_topic_partitions == 2


def test_the_servers_own_settings_are_accepted_and_left_to_it(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("kafka.listen=127.0.0.1:0\ngroup.coordinator.shards=2\n")
    assert build_config(str(path), ["connections.max.idle.ms=1000"]).offsets_topic_partitions == 2
    with pytest.raises(UsageError, match="connections.max.idle.ms': out of range"):
        build_config(str(path), [f"connections.max.idle.ms={2**63}"])


def test_a_kafka_server_properties(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="kip848.config"):
        config = build_config(None, [], str(KAFKA_SERVER_PROPERTIES))
    assert config == GroupCoordinatorConfig(
        consumer_session_timeout_ms=30_000,
        consumer_min_session_timeout_ms=30_000,
        consumer_heartbeat_interval_ms=4_000,
        consumer_min_heartbeat_interval_ms=4_000,
        consumer_assignors=("uniform", "range"),
        consumer_migration_policy="bidirectional",
        classic_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=20_160,
        offset_metadata_max_bytes=4_096,
        num_partitions=3,  # CreateTopics' default partition count, as the broker's
        offsets_topic_partitions=50,  # the broker's __consumer_offsets partitions
    )
    taken = (
        "group.consumer.assignors, group.consumer.heartbeat.interval.ms, "
        "group.consumer.migration.policy, group.consumer.min.heartbeat.interval.ms, "
        "group.consumer.min.session.timeout.ms, group.consumer.session.timeout.ms, "
        "group.initial.rebalance.delay.ms, num.partitions, offset.metadata.max.bytes, "
        "offsets.retention.minutes, offsets.topic.num.partitions, socket.request.max.bytes"
    )
    ignored = sorted(
        r.getMessage().split(": ignored ")[1].removesuffix(" (not a coordinator setting)")
        for r in caplog.records
        if r.levelno == logging.DEBUG
    )
    assert ignored == [
        "advertised.listeners",
        "controller.listener.names",
        "controller.quorum.bootstrap.servers",
        "group.coordinator.rebalance.protocols",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "listeners",
        "log.dirs",
        "log.retention.check.interval.ms",
        "log.retention.hours",
        "log.segment.bytes",
        "node.id",
        "num.io.threads",
        "num.network.threads",
        "num.recovery.threads.per.data.dir",
        "offsets.topic.replication.factor",
        "process.roles",
        "sasl.jaas.config",
        "share.coordinator.state.topic.replication.factor",
        "socket.receive.buffer.bytes",
        "socket.send.buffer.bytes",
        "ssl.keystore.location",
        "transaction.state.log.min.isr",
        "transaction.state.log.replication.factor",
    ]
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno == logging.INFO] == [
        (
            logging.INFO,
            f"{KAFKA_SERVER_PROPERTIES}: 12 coordinator settings taken ({taken}); "
            "24 keys that are not the coordinator's ignored",
        )
    ]
    debug = {r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG}
    assert (
        f"{KAFKA_SERVER_PROPERTIES}:15: ignored advertised.listeners (not a coordinator setting)"
        in debug
    )
    assert (
        f"{KAFKA_SERVER_PROPERTIES}:61: ignored sasl.jaas.config (not a coordinator setting)"
        in debug
    )


def test_precedence_server_properties_then_config_file_then_set(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("group.consumer.session.timeout.ms=40000\ngroup.coordinator.shards=3\n")
    config = build_config(str(path), ["group.coordinator.shards=5"], str(KAFKA_SERVER_PROPERTIES))
    assert (config.consumer_session_timeout_ms, config.offsets_topic_partitions) == (40_000, 5)
    assert config.consumer_heartbeat_interval_ms == 4_000  # from server.properties


def test_a_java_assignor_class_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("group.consumer.assignors=com.example.MyAssignor\nnode.id=1\n")
    with pytest.raises(UsageError, match=r"^group.consumer.assignors: .*'com.example.MyAssignor'"):
        build_config(None, [], str(path))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--set", "group.consumer.session.timeout.ms=abc"],
            "invalid value 'abc' for 'group.consumer.session.timeout.ms': expected an integer "
            "(Kafka type INT, -2147483648..2147483647)",
        ),
        (
            ["--set", "group.consumer.max.size=99999999999"],
            "invalid value 99999999999 for 'group.consumer.max.size': out of range, expected an "
            "integer (Kafka type INT, -2147483648..2147483647)",
        ),
        (
            ["--set", "offsets.retention.check.interval.ms=99999999999999999999"],
            "invalid value 99999999999999999999 for 'offsets.retention.check.interval.ms': out of "
            "range, expected an integer (Kafka type LONG, -9223372036854775808..9223372036854775807)",
        ),
        (
            ["--set", "group.consumer.migration.policy=sometimes"],
            "invalid value 'sometimes' for 'group.consumer.migration.policy': must be one of "
            "bidirectional, upgrade, downgrade, disabled",
        ),
    ],
)
def test_a_bad_set_value_names_the_setting_and_the_type(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["serve", *argv]) == 2
    assert capsys.readouterr() == ("", f"kip848 serve: {message}\n")


def test_a_bad_file_value_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.properties"
    path.write_text("# shards\ngroup.coordinator.shards=\\\n  many\n")
    assert main(["replay", "--config-file", str(path), "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"kip848 replay: {path}:2: invalid value 'many' for 'group.coordinator.shards': expected "
        "an integer (Kafka type INT, -2147483648..2147483647)\n"
    )
