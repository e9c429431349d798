"""gRPC authentication on a real ``kip848 serve`` (docs/security.md, "Authentication"): the
listener requires it (``GRPC:SASL_SSL``); a call authenticates with a bearer JWT or a client
certificate (its subject mapped by ``ssl.principal.mapping.rules``); what the principal may do
is the ACLs'. The CLI (``--command-config`` with Kafka's client names, ``--token-file``) and
``kip848.client`` (TLS + token) authenticate; unauthenticated calls get UNAUTHENTICATED."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from certs import TestCa
from conftest import ServerProcess, join_request, run_cli
from jwks import TokenIssuer

from kip848.client import GroupMember, tls_credentials, token_file
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

GROUP_AUTHORIZATION_FAILED = 30


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    directory = tmp_path_factory.mktemp("grpc-auth")
    ca = TestCa(str(directory))
    server_pem = ca.server()
    alice_cert = ca.client("alice", "CN=Alice,OU=eng,O=kip848")
    issuer = TokenIssuer(directory)
    admin_token = issuer.token("admin")
    server = ServerProcess(
        directory / "d",
        "--tls-cert",
        server_pem.both,
        "--tls-ca",
        ca.ca_file,
        "--tls-client-auth",
        "requested",
        "--set",
        "listener.security.protocol.map=GRPC:SASL_SSL",
        "--set",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{issuer.path}",
        "--set",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/L",
        "--set",
        "super.users=User:admin",
        clock="system",
        # The harness's own calls (waiting for the load, set-up) as the super user.
        credentials=grpc.composite_channel_credentials(
            tls_credentials(ca.ca_file), grpc.access_token_call_credentials(admin_token)
        ),
    )
    server.create_topic("orders", 2)
    # alice may read her groups (and the topic); nobody else has ACLs on them.
    acls = [
        admin_pb2.AclBinding(
            resource_type=rtype,
            resource_name=name,
            pattern_type=3,
            principal="User:alice",
            host="*",
            operation=3,  # READ
            permission_type=3,
        )
        for rtype, name in (
            (3, "alice-group"),
            (3, "alice-client"),
            (3, "alice-watch"),
            (2, "orders"),
        )
    ]
    made = server.admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=acls), timeout=10)
    assert [r.error_code for r in made.results] == [0, 0, 0, 0], made
    # Calls with credentials of their own go on a channel without the super user's token.
    with grpc.secure_channel(server.address, tls_credentials(ca.ca_file)) as plain:
        yield server, ca, alice_cert, issuer, directory, plain
    assert server.stop() == 0


def test_calls_without_credentials_or_with_bad_ones_are_unauthenticated(setup) -> None:  # type: ignore[no-untyped-def]
    server, _ca, _alice, issuer, directory, plain = setup
    stranger = TokenIssuer(directory, "stranger.json")
    for metadata, why in (
        ([], "Authentication required"),
        (bearer(issuer.token("alice", lifetime_s=-120)), "expired"),
        (bearer(stranger.token("alice")), "Invalid bearer token"),
        ([("authorization", "Basic YWxpY2U6cHc=")], "must be 'Bearer <JWT>'"),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            admin_pb2_grpc.AdminServiceStub(plain).ListGroups(
                admin_pb2.ListGroupsRequest(), metadata=metadata, timeout=10
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert why in (refused.value.details() or ""), refused.value.details()


def _heartbeat(channel: grpc.Channel, metadata: list[tuple[str, str]]) -> int:
    reply = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(**join_request("alice-group", ["orders"])),
        metadata=metadata,
        timeout=10,
    )
    return int(reply.error_code)


def test_certificate_and_token_principals_meet_the_acls(setup) -> None:  # type: ignore[no-untyped-def]
    _server, ca, alice, issuer, _directory, plain = setup
    creds = tls_credentials(ca.ca_file, alice.cert, alice.key)
    with grpc.secure_channel(_server.address, creds) as channel:  # CN=Alice -> User:alice
        assert _heartbeat(channel, []) == 0
    assert _heartbeat(plain, bearer(issuer.token("alice"))) == 0
    assert _heartbeat(plain, bearer(issuer.token("bob"))) == GROUP_AUTHORIZATION_FAILED
    # bob cannot read alice's offsets either.
    fetched = offsets_pb2_grpc.OffsetServiceStub(plain).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id="alice-group")]
        ),
        metadata=bearer(issuer.token("bob")),
        timeout=10,
    )
    assert [g.error_code for g in fetched.groups] == [GROUP_AUTHORIZATION_FAILED]


def test_the_cli_authenticates_with_kafka_client_properties(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, ca, _alice, issuer, _directory, _plain = setup
    token = tmp_path / "admin.jwt"
    token.write_text(issuer.token("admin") + "\n")
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={ca.ca_file}\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url=file://{token}\n"
    )
    listed = run_cli(
        "topics", "list", "--bootstrap-server", server.address, "--command-config", str(config)
    )
    assert listed.returncode == 0 and "orders" in listed.stdout, listed.stderr

    def with_token_file(path: Path) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "topics", "list", "--bootstrap-server", server.address, "--tls-ca", ca.ca_file,
            "--token-file", str(path),
        )  # fmt: skip

    flags = with_token_file(token)
    assert flags.returncode == 0 and "orders" in flags.stdout, flags.stderr
    refused = run_cli(
        "topics", "list", "--bootstrap-server", server.address, "--tls-ca", ca.ca_file
    )
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr, refused.stderr
    assert "--token-file" in refused.stderr  # the hint
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n")
    password = run_cli(
        "topics", "list", "--bootstrap-server", server.address, "--command-config", str(config)
    )
    assert password.returncode == 2 and "never a password" in password.stderr, password.stderr
    # A token file that is missing or empty: a clear usage error before any call (was a
    # traceback, and a call the server reset: an empty Bearer header is no valid HTTP/2 field).
    missing, empty = tmp_path / "missing.jwt", tmp_path / "empty.jwt"
    empty.write_text("\n")
    for path, why in (
        (missing, f"cannot read {missing}: No such file or directory"),
        (empty, f"{empty} is empty (it must hold a JWT)"),
    ):
        bad = with_token_file(path)
        assert (bad.returncode, bad.stdout, bad.stderr) == (
            2,
            "",
            f"kip848 topics: --token-file: {why}\n",
        )


def test_kip848_client_with_tls_and_a_token(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, ca, _alice, issuer, _directory, _plain = setup
    token = tmp_path / "alice.jwt"
    token.write_text(issuer.token("alice"))

    async def story() -> None:
        async with GroupMember(
            server.address,
            "alice-client",
            topics=["orders"],
            credentials=tls_credentials(ca.ca_file),
            token=token_file(str(token)),
            find_coordinator=False,
            push=False,
        ) as member:
            await asyncio.wait_for(member.wait_stable(), 30)
            assert {tp.partition for tp in member.assignment} == {0, 1}

    asyncio.run(story())


def test_the_example_worker_authenticates(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """examples/work-distribution/worker.py with --tls-ca and --token-file joins a group."""
    import json
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    server, ca, _alice, issuer, _directory, _plain = setup
    token = tmp_path / "worker.jwt"
    token.write_text(issuer.token("alice"))
    worker = Path(__file__).resolve().parents[2] / "examples" / "work-distribution" / "worker.py"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(worker),
            "--target",
            server.address,
            "--name",
            "w1",
            "--group",
            "wd-secured",
            "--topic",
            "orders",
            "--tls-ca",
            ca.ca_file,
            "--token-file",
            str(token),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None
    events: list[dict[str, object]] = []
    buf = b""
    deadline = time.monotonic() + 30
    try:
        while not any(e.get("event") == "assigned" for e in events):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, events
            if select.select([proc.stdout], [], [], left)[0]:
                buf += os.read(proc.stdout.fileno(), 65536)
                *lines, rest = buf.split(b"\n")
                buf = rest
                events += [json.loads(line) for line in lines if line.strip()]
        assigned = next(e for e in events if e.get("event") == "assigned")
        assert assigned["units"] == [0, 1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_front_ends_authenticate_the_same_way(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--grpc-processes: calls reaching a front end (grpc.aio) carry their token and verified
    certificate subject to the coordinator process, which decides as for its own calls."""
    _server, ca, alice, issuer, directory, _plain = setup
    server_pem = ca.server("server2")
    server = ServerProcess(
        tmp_path / "d",
        "--grpc-processes",
        "2",
        "--tls-cert",
        server_pem.both,
        "--tls-ca",
        ca.ca_file,
        "--tls-client-auth",
        "required",
        "--set",
        "listener.security.protocol.map=GRPC:SASL_SSL",
        "--set",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{issuer.path}",
        "--set",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/L",
        credentials=tls_credentials(ca.ca_file, alice.cert, alice.key),
    )
    try:
        stranger = TokenIssuer(directory, "stranger2.json")
        for _ in range(6):  # connections land on any of the processes
            creds = tls_credentials(ca.ca_file, alice.cert, alice.key)
            with grpc.secure_channel(server.address, creds) as channel:
                admin = admin_pb2_grpc.AdminServiceStub(channel)
                assert admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10).error_code == 0
                with pytest.raises(grpc.RpcError) as refused:
                    admin.ListGroups(
                        admin_pb2.ListGroupsRequest(),
                        metadata=bearer(stranger.token("alice")),
                        timeout=10,
                    )
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "transport", [("--grpc-transport", "grpcio"), ("--grpc-processes", "3")], ids=str
)
def test_one_certificate_is_one_principal_on_every_grpc_server(
    tmp_path: Path, transport: tuple[str, str]
) -> None:
    """A certificate whose subject has an e-mail address and non-ASCII letters is the same
    principal however its connection is served: grpc.aio (--grpc-transport grpcio, the front
    ends) took grpc-core's OpenSSL rendering (``emailAddress=``, ``Zo\\C3\\AB``) where the h2
    server and the Kafka listener write ``1.2.840.113549.1.9.1=``, ``Zoë`` (documented), so a
    DENY naming the documented form did not hold on those connections."""
    ca = TestCa(str(tmp_path))
    subject = "CN=Zoë,OU=staff,1.2.840.113549.1.9.1=zoe@example.org"
    zoe = ca.client("zoe", subject)
    server = ServerProcess(
        tmp_path / "d",
        *("--tls-cert", ca.server().both, "--tls-ca", ca.ca_file, "--tls-client-auth", "required"),
        *transport,
        credentials=tls_credentials(ca.ca_file, zoe.cert, zoe.key),
    )
    try:
        acl = {"resource_type": 3, "resource_name": "staff", "pattern_type": 3, "host": "*"}
        acls = [
            admin_pb2.AclBinding(**acl, principal="User:*", operation=8, permission_type=3),
            admin_pb2.AclBinding(
                **acl, principal=f"User:{subject}", operation=2, permission_type=2
            ),
        ]
        made = server.admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=acls), timeout=10)
        assert [r.error_code for r in made.results] == [0, 0]
        for _ in range(12):  # with front ends, connections land on any process
            creds = tls_credentials(ca.ca_file, zoe.cert, zoe.key)
            with grpc.secure_channel(server.address, creds) as channel:
                fetched = offsets_pb2_grpc.OffsetServiceStub(channel).OffsetFetch(
                    offsets_pb2.OffsetFetchRequest(
                        groups=[offsets_pb2.OffsetFetchRequest.Group(group_id="staff")]
                    ),
                    timeout=10,
                )
            assert [g.error_code for g in fetched.groups] == [GROUP_AUTHORIZATION_FAILED]
    finally:
        assert server.stop() == 0


def test_a_watch_stream_ends_when_its_token_expires(setup) -> None:  # type: ignore[no-untyped-def]
    """ConsumerGroupWatch is authenticated again before each message, as each unary call is:
    a stream opened with a token that then expired ends UNAUTHENTICATED at its next message
    (the client opens it again with its current token) instead of going on with it."""
    _server, _ca, _alice, issuer, _directory, plain = setup
    groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(plain)

    def join() -> Any:
        return groups.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                **join_request("alice-watch", ["orders"])
            ),
            metadata=bearer(issuer.token("alice")),
            timeout=10,
        )

    first = join()
    assert first.error_code == 0
    # Accepted for 3 s more: the validator allows sasl.oauthbearer.clock.skew.seconds (30).
    issued = time.monotonic()
    short = issuer.token("alice", lifetime_s=-27)
    stream = groups.ConsumerGroupWatch(
        consumer_group_pb2.ConsumerGroupWatchRequest(
            group_id="alice-watch", member_id=first.member_id
        ),
        metadata=bearer(short),
        timeout=20,
    )
    try:
        events = iter(stream)
        assert next(events).error_code == 0  # the member as it is, the token still valid
        time.sleep(max(0.0, issued + 4 - time.monotonic()))
        assert join().error_code == 0  # a second member: the first one's target shrinks
        with pytest.raises(grpc.RpcError) as ended:
            next(events)
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "the token has expired" in (ended.value.details() or "")
    finally:
        stream.cancel()
