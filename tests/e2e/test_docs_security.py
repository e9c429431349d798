"""docs/security.md's configuration examples, run as written (its paths replaced by files the
test makes, its listeners bound to 127.0.0.1:0): section 5.1's listeners start and serve, and
section 5.4's ``--command-config`` signs the ``kip848`` command in to that server with a
bearer token. The 5.1 example once enabled OAUTHBEARER without the JWKS it needs, and the
server refused to start."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
from certs import TestCa
from conftest import ServerProcess
from jwks import TokenIssuer
from kafka_support import KafkaClient, request

from kip848.v1 import common_pb2, consumer_group_pb2

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "security.md").read_text()


def properties_block(after: str) -> str:
    """The first ```properties block of the doc after the text ``after``."""
    return re.findall(r"```properties\n(.*?)```", DOC.split(after, 1)[1], re.S)[0]


def api_versions_over_tls(address: str, ca_file: str) -> set[int]:
    """The API keys a Kafka listener offers, asked over TLS."""
    client = KafkaClient(address)
    context = ssl.create_default_context(cafile=ca_file)
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    try:
        answer = client.call(request(18, 3, client_software_name="t", client_software_version="1"))
    finally:
        client.close()
    assert answer.error_code == 0
    return {int(k.api_key) for k in answer.api_keys}


def test_the_listener_and_command_config_examples(tmp_path: Path) -> None:
    ca = TestCa(str(tmp_path))
    server_pem = ca.server()
    issuer = TokenIssuer(tmp_path)
    example = properties_block("### 5.1 Kafka listeners")
    config = re.sub(r"//[^,\s]+:\d+", "//127.0.0.1:0", example.split("\n", 1)[0]) + "\n"
    config += example.split("\n", 1)[1]
    config = config.replace("/etc/kip848/server.pem", server_pem.both)
    config = config.replace("/etc/kip848/jwks.json", str(issuer.path))
    assert "/etc/kip848" not in config, config
    (tmp_path / "kip848.properties").write_text(config)
    server = ServerProcess(
        tmp_path / "data",
        "--config-file",
        str(tmp_path / "kip848.properties"),
        clock="system",
        lines=3,
        credentials=grpc.ssl_channel_credentials(Path(ca.ca_file).read_bytes()),
    )
    try:
        assert server.lines[1].startswith("kafka listening on 127.0.0.1:"), server.lines
        assert server.lines[2].startswith("kafka CLIENTS listening on 127.0.0.1:"), server.lines
        clients = server.lines[2].rpartition(" ")[2]
        # CLIENTS is SASL_SSL: TLS, and the SASL exchange offered.
        assert {17, 36} <= api_versions_over_tls(clients, ca.ca_file)

        # Section 5.4: the kip848 command over gRPC (SSL here) with a bearer token.
        command_config = properties_block("### 5.4 The clients' options")
        command_config = command_config.replace("/etc/kip848/ca.pem", ca.ca_file)
        token = tmp_path / "kip848.jwt"
        token.write_text(issuer.token("ops"))
        command_config = command_config.replace("/run/secrets/kip848.jwt", str(token))
        assert "/etc/kip848" not in command_config and "/run/" not in command_config
        (tmp_path / "command.properties").write_text(command_config)
        done = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "topics", "create", "orders"]
            + ["--partitions", "3", "--bootstrap-server", server.address]
            + ["--command-config", str(tmp_path / "command.properties")],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), done
        audit = [line for line in server.stderr_text().splitlines() if "create_topic" in line]
        assert len(audit) == 1 and "principal=User:ops" in audit[0], audit
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_a_refusal_over_grpc_is_audited_with_its_client(tmp_path: Path) -> None:
    """Section 9: every refusal is an audit line naming who was refused, from where. Over gRPC
    the client id and address were left empty unless some ACL named a host (the server reads
    a call's metadata only when it needs it)."""
    server = ServerProcess(tmp_path / "data")
    try:
        server.create_topic("orders", 1)
        acl = "--allow-principal User:alice --operation Read --group payments"
        done = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "acls", "add", *acl.split()]
            + ["--bootstrap-server", server.address],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            check=False,
        )
        assert done.returncode == 0, done
        refused = server.heartbeat(
            "shop-app",
            group_id="payments",
            member_id="m1",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=common_pb2.TopicNames(names=["orders"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        assert refused.error_code == 30, refused  # GROUP_AUTHORIZATION_FAILED
        described = server.groups.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["payments"]),
            timeout=10,
            metadata=(("client-id", "ops-tool"),),
        )
        assert described.groups[0].error_code == 30, described
    finally:
        assert server.stop() == 0, server.stderr_text()
    audit = [line for line in server.stderr_text().splitlines() if "authorization_refused" in line]
    assert [line.partition(" INFO kip848.audit: ")[2] for line in audit] == [
        "Audit: action=authorization_refused result=GROUP_AUTHORIZATION_FAILED "
        "client_id=shop-app client_address=127.0.0.1 protocol=grpc principal=User:ANONYMOUS "
        "rpc=ConsumerGroupHeartbeat operation=READ resource=GROUP:payments",
        "Audit: action=authorization_refused result=GROUP_AUTHORIZATION_FAILED "
        "client_id=ops-tool client_address=127.0.0.1 protocol=grpc principal=User:ANONYMOUS "
        "rpc=ConsumerGroupDescribe operation=DESCRIBE resource=GROUP:payments",
    ]
