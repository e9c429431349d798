"""A node behind the cluster log past journal retention loads the log's compacted view in place
of its copy (``Partitions._reload``, docs/ha.md): ACLs and SCRAM credentials created, changed
and deleted meanwhile, the group configs, and a view left empty. After the reload the node —
its committed copy (what its authorizer and SCRAM sign-ins read), its registry (what its
commands decide on) — equals a node started fresh on the same store, and its appends land.
On the memory store the HA tests share and on PostgreSQL (``load_snapshot`` there)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import make_runtime
from cluster_log_steps import alter_session_timeout
from test_server_authorization import ADMIN, EVERY_ACL

from coordinator.core import topics as topics_module
from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.factory import group_configs_of
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime import partitions as partitions_module
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security import scram
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.metadata import ScramDeletion, ScramUpsertion
from coordinator.security.principal import KafkaPrincipal
from coordinator.security.scram import ScramMechanism
from coordinator.server.api import (
    AclSpec,
    AlterScramCredentials,
    ConfigResource,
    DescribeConfigs,
)
from coordinator.server.service import CoordinatorService

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
ALLOW, DENY = 3, 2
SESSION_TIMEOUT = "consumer.session.timeout.ms"
USERS = ("alice", "bob", "carol", "dave")
PRINCIPALS = [KafkaPrincipal.parse(f"User:{u}") for u in (*USERS, "ANONYMOUS")]
RESOURCES = [
    (ResourceType.TOPIC, "a1"),
    (ResourceType.TOPIC, "a2"),
    (ResourceType.TOPIC, "d"),
    (ResourceType.TOPIC, "t"),
    (ResourceType.GROUP, "g"),
]
OPERATIONS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE]


def acl(
    user: str,
    name: str,
    operation: AclOperation = AclOperation.READ,
    permission: int = ALLOW,
    resource: ResourceType = ResourceType.TOPIC,
) -> AclSpec:
    """A literal ACL (or the filter matching exactly it)."""
    return AclSpec(
        resource_type=int(resource),
        resource_name=name,
        pattern_type=3,
        principal=f"User:{user}",
        host="*",
        operation=int(operation),
        permission_type=permission,
    )


def upsert(user: str, mech: ScramMechanism, password: str, iterations: int = 4096) -> Any:
    salt = f"salt-of-{user}-{password}".encode()
    return ScramUpsertion(
        name=user,
        mechanism=int(mech),
        iterations=iterations,
        salt=salt,
        salted_password=scram.salted_password(mech, password, salt, iterations),
    )


@dataclass
class Node:
    rt: CoordinatorRuntime
    parts: Any
    service: CoordinatorService
    store: Any

    async def ok(self, answer: Any) -> None:
        """Every entry of a service answer succeeded."""
        value = answer.value
        entries = value if isinstance(value, list) else [value]
        for entry in entries:
            code = getattr(entry, "error_code", 0)
            assert code == ErrorCode.NONE, entry

    async def follow(self, last_writer: Node) -> None:
        """Its heartbeat read the cluster log's end (as ``last_writer``, who appended last,
        knows it): it catches up, reloading if need be."""
        self.parts.follow_cluster_log(last_writer.store.last_offset(CLUSTER_LOG))
        await asyncio.wait_for(self.parts.caught_up(), 10)

    def decisions(self) -> dict[tuple[str, str, str, str], bool]:
        authorizer = self.service.authorizer
        return {
            (str(p), op.name, kind.name, name): authorizer.authorize(
                p, "/127.0.0.1", op, kind, name
            )
            for p in PRINCIPALS
            for op in OPERATIONS
            for kind, name in RESOURCES
        }

    def credentials(self) -> dict[tuple[str, str], Any]:
        return {
            (u, m.name): self.service.scram_credential(u, m)
            for u in USERS
            for m in (SHA256, SHA512)
        }

    async def described(self) -> Any:
        acls = (await self.service.describe_acls(EVERY_ACL, ADMIN)).value or []
        users = (await self.service.describe_user_scram_credentials(None, ADMIN)).value or []
        topics = (await self.service.list_topics(None, ADMIN)).value or []
        asked = DescribeConfigs(resources=(ConfigResource(resource_type=32, resource_name="g"),))
        (configs,) = (await self.service.describe_configs(asked, ADMIN)).value or []
        return {
            "acls": sorted(map(str, acls)),
            "users": sorted(map(str, users)),
            "topics": sorted((t.name, t.num_partitions) for t in topics),
            "session timeout": next(
                (c.value for c in configs.configs if c.name == SESSION_TIMEOUT), None
            ),
        }

    async def state(self) -> dict[str, Any]:
        """Everything a node holds of the cluster log and answers from it."""
        committed = self.rt.committed
        return {
            "committed": registry_state(committed.registry),
            "committed security": committed.security.snapshot(),
            "committed records": sorted(map(repr, committed.records.items())),
            "registry": registry_state(self.rt.registry),
            "registry security": self.rt.security.snapshot(),
            "decisions": self.decisions(),
            "credentials": self.credentials(),
            "described": await self.described(),
        }


def registry_state(registry: Any) -> dict[str, Any]:
    """A cluster-level state machine's topics and group configs (its security apart)."""
    return {
        "topics": sorted(map(repr, registry.list_topics())),
        "image": sorted(map(repr, registry.image().by_name.values())),
        "group configs": group_configs_of(registry).snapshot(),
    }


@pytest.fixture(params=["memory", "postgresql"])
def open_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    """Opens another handle of one shared store (each node its own, as each process)."""
    opened: list[Any] = []
    if request.param == "memory":
        shared = MemoryRecordStore(partitions=1)

        def open_memory() -> Any:
            opened.append(MemoryRecordStore(_data=shared._data))
            return opened[-1]

        yield open_memory
        return
    from coordinator.runtime.store import PostgresRecordStore

    dsn = request.getfixturevalue("pg_dsn")

    def open_postgres() -> Any:
        opened.append(PostgresRecordStore(dsn, partitions=1))
        return opened[-1]

    yield open_postgres
    for store in opened:
        store.close()


@asynccontextmanager
async def node(open_store: Callable[[], Any], node_id: int) -> AsyncIterator[Node]:
    store = open_store()
    rt = make_runtime(store, 1)
    parts = rt.share_partitions(node_id)
    await rt.start()
    parts.joined()
    service = CoordinatorService(
        rt,
        authorizer=AuthorizerConfig(
            super_users=frozenset({"User:admin"}), allow_everyone_if_no_acl_found=False
        ),
    )
    try:
        yield Node(rt, parts, service, store)
    finally:
        await rt.close()


async def before_the_cut(writer: Node) -> None:
    """What both nodes apply: topic t, ACLs on a1, a2 (alice) and group g (bob), credentials
    of alice, bob and carol, a session timeout for group g."""
    s = writer.service
    await writer.rt.create_topics([NewTopic(name="t", num_partitions=2)])
    await writer.ok(
        await s.create_acls(
            [
                acl("alice", "a1"),
                acl("alice", "a2"),
                acl("bob", "g", resource=ResourceType.GROUP),
            ],
            ADMIN,
        )
    )
    await writer.ok(
        await s.alter_user_scram_credentials(
            AlterScramCredentials(
                upsertions=(
                    upsert("alice", SHA256, "pw1"),
                    upsert("bob", SHA512, "pw2"),
                    upsert("carol", SHA256, "pw3"),
                )
            ),
            ADMIN,
        )
    )
    await writer.ok(await s.incremental_alter_configs(alter_session_timeout("g", "50000"), ADMIN))


async def missed(writer: Node, newest: str) -> None:
    """What the follower misses: a topic created (n); an ACL created (dave on d), one changed
    (alice on a2 from ALLOW to DENY), one deleted (alice on a1); a credential created (dave),
    one changed (alice's: another password, salt and iteration count), one deleted (bob's);
    the session timeout changed. ``newest``: the log ends with the deletions (tombstones: its
    end past the view's last record) or with a change after them."""
    s = writer.service
    await writer.rt.create_topics([NewTopic(name="n", num_partitions=3)])
    await writer.ok(await s.create_acls([acl("dave", "d", AclOperation.DESCRIBE)], ADMIN))
    await writer.ok(await s.delete_acls([acl("alice", "a2")], ADMIN))
    await writer.ok(await s.create_acls([acl("alice", "a2", permission=DENY)], ADMIN))
    await writer.ok(
        await s.alter_user_scram_credentials(
            AlterScramCredentials(
                upsertions=(upsert("dave", SHA256, "pw4"), upsert("alice", SHA256, "new", 8192))
            ),
            ADMIN,
        )
    )
    await writer.ok(await s.incremental_alter_configs(alter_session_timeout("g", "60000"), ADMIN))
    await writer.ok(await s.delete_acls([acl("alice", "a1")], ADMIN))
    await writer.ok(
        await s.alter_user_scram_credentials(
            AlterScramCredentials(deletions=(ScramDeletion(name="bob", mechanism=int(SHA512)),)),
            ADMIN,
        )
    )
    if newest == "a change after the deletions":
        await writer.ok(
            await s.alter_user_scram_credentials(
                AlterScramCredentials(upsertions=(upsert("carol", SHA512, "pw5"),)), ADMIN
            )
        )


@dataclass
class Seen:
    """What a reload did: the keys the node's registry replayed (on the loop), and the topics
    each of its images (its registry's, its committed copy's) was built with from the one
    before it (``topics.image_changed``)."""

    replayed: list[Any] = field(default_factory=list)
    images: list[list[str]] = field(default_factory=list)


@contextmanager
def watching_the_reload(node: Node, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    seen = Seen()
    registry = node.rt.registry
    replay, image_changed = registry.replay, topics_module.image_changed

    def replayed(record: Any) -> None:
        seen.replayed.append(record.key)
        replay(record)

    def built(image: Any, topics: Any, names: Any, version: int) -> Any:
        if topics is registry.topics or topics is node.rt.committed.registry.topics:
            seen.images.append(list(names))
        return image_changed(image, topics, names, version)

    monkeypatch.setattr(registry, "replay", replayed)
    monkeypatch.setattr(topics_module, "image_changed", built)
    try:
        yield seen
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("newest", ["tombstones", "a change after the deletions"])
async def test_acls_and_credentials_after_a_reload_equal_a_fresh_nodes(
    open_store: Callable[[], Any],
    newest: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await before_the_cut(writer)
        await behind.follow(writer)
        assert await behind.state() == await writer.state()
        old = await behind.state()
        had = dict(behind.rt.committed.records)
        image = behind.rt.registry.image()

        await missed(writer, newest)
        writer.store.expire_journal(2**62)  # the follower was cut off past the retention
        assert list(writer.store.journal(CLUSTER_LOG, from_offset=0)) == []
        with watching_the_reload(behind, monkeypatch) as seen:
            await behind.follow(writer)  # the journal lacks what it did not apply: it reloads
        assert "loading the log's compacted view" in caplog.text
        assert behind.rt.state is RuntimeState.ACTIVE
        assert behind.parts.cluster_offset == writer.store.last_offset(CLUSTER_LOG)
        # Only what changed was replayed on the loop, the topics' images built from the ones
        # before and the topic that changed (n): t's image is the one it had.
        now = behind.rt.committed.records
        changed = {k for k in had.keys() | now.keys() if had.get(k) != now.get(k)}
        assert len(changed) == (9 if newest == "tombstones" else 10)
        assert sorted(map(repr, seen.replayed)) == sorted(map(repr, changed))
        assert seen.images and all(names == ["n"] for names in seen.images)
        assert behind.rt.registry.image().by_name["t"] is image.by_name["t"]
        assert sorted(behind.rt.registry.image().by_name) == ["n", "t"]

        async with node(open_store, 3) as fresh:
            expected = await fresh.state()
        assert await behind.state() == expected
        assert await writer.state() == expected
        assert expected != old
        # What each change means to the authorizer and to a SCRAM sign-in.
        decisions, creds = expected["decisions"], expected["credentials"]
        assert old["decisions"][("User:alice", "READ", "TOPIC", "a1")] is True
        assert decisions[("User:alice", "READ", "TOPIC", "a1")] is False  # deleted
        assert old["decisions"][("User:alice", "READ", "TOPIC", "a2")] is True
        assert decisions[("User:alice", "READ", "TOPIC", "a2")] is False  # now DENY
        assert decisions[("User:dave", "DESCRIBE", "TOPIC", "d")] is True  # created
        assert decisions[("User:bob", "READ", "GROUP", "g")] is True  # kept
        assert creds[("alice", "SCRAM_SHA_256")].iterations == 8192  # changed
        assert old["credentials"][("bob", "SCRAM_SHA_512")] is not None
        assert creds[("bob", "SCRAM_SHA_512")] is None  # deleted
        assert creds[("dave", "SCRAM_SHA_256")] is not None  # created
        assert creds[("carol", "SCRAM_SHA_256")] == old["credentials"][("carol", "SCRAM_SHA_256")]
        assert expected["described"]["session timeout"] == "60000"

        # Its appends land after the log's end, and the writer follows them.
        await behind.ok(
            await behind.service.delete_acls([acl("dave", "d", AclOperation.DESCRIBE)], ADMIN)
        )
        await behind.ok(
            await behind.service.alter_user_scram_credentials(
                AlterScramCredentials(
                    deletions=(ScramDeletion(name="alice", mechanism=int(SHA256)),)
                ),
                ADMIN,
            )
        )
        await writer.follow(behind)
        assert await writer.state() == await behind.state()
        assert writer.decisions()[("User:dave", "DESCRIBE", "TOPIC", "d")] is False
        assert writer.credentials()[("alice", "SCRAM_SHA_256")] is None


async def test_a_reload_of_an_empty_view_leaves_nothing_behind(
    open_store: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Everything the follower had was deleted while it was cut off (the topic, every ACL,
    every credential, the group config), and retention removed those deletions: the view is
    empty, the log's end past it. The node reloads to nothing — no ACL left to allow what was
    revoked, no credential to sign in with — as a fresh node, and its appends land."""
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await before_the_cut(writer)
        await behind.follow(writer)
        had = await behind.state()
        assert had["decisions"][("User:alice", "READ", "TOPIC", "a1")] is True
        s = writer.service
        assert [r.error_code for r in await writer.rt.delete_topics(["t"])] == [0]
        await writer.ok(await s.delete_acls([EVERY_ACL], ADMIN))
        await writer.ok(
            await s.alter_user_scram_credentials(
                AlterScramCredentials(
                    deletions=(
                        ScramDeletion(name="alice", mechanism=int(SHA256)),
                        ScramDeletion(name="bob", mechanism=int(SHA512)),
                        ScramDeletion(name="carol", mechanism=int(SHA256)),
                    )
                ),
                ADMIN,
            )
        )
        await writer.ok(await s.incremental_alter_configs(alter_session_timeout("g", None), ADMIN))
        writer.store.expire_journal(2**62)
        _end, chunks = writer.store.load_snapshot(CLUSTER_LOG)
        assert [row for rows in chunks for row in rows] == []  # the view is empty
        await behind.follow(writer)
        assert "loading the log's compacted view" in caplog.text
        assert behind.parts.cluster_offset == writer.store.last_offset(CLUSTER_LOG) > 0

        async with node(open_store, 3) as fresh:
            expected = await fresh.state()
        got = await behind.state()
        assert got == expected
        assert got["committed records"] == [] and got["described"]["acls"] == []
        assert got["committed security"] == {"acls": [], "credentials": []}
        assert not any(got["decisions"].values())  # ACLs exist nowhere: everything refused
        assert not any(got["credentials"].values())
        assert got["described"]["topics"] == []

        await behind.ok(await behind.service.create_acls([acl("carol", "t")], ADMIN))
        await writer.follow(behind)
        assert await writer.state() == await behind.state()


async def test_a_log_never_written_is_followed_without_a_reload(
    open_store: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """An empty cluster log (nothing ever appended: its end -1): following it loads nothing
    and reloads nothing, and the first append through either node lands at offset 0."""
    async with node(open_store, 1) as first, node(open_store, 2) as second:
        await second.follow(first)
        assert second.parts.cluster_offset == -1
        assert "compacted view" not in caplog.text
        assert await second.state() == await first.state()
        await second.ok(await second.service.create_acls([acl("alice", "t")], ADMIN))
        assert second.store.last_offset(CLUSTER_LOG) == 0
        await first.follow(second)
        assert await first.state() == await second.state()
        assert first.decisions()[("User:alice", "READ", "TOPIC", "t")] is True


async def test_a_reload_whose_read_of_the_nodes_copy_failed_reads_again(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader thread reads the node's copy while the loop goes on; should a write change
    it meanwhile, the read may fail ("dictionary changed size during iteration"): the
    reload's round ends without applying anything and the next round reads again."""
    async with node(open_store, 1) as writer, node(open_store, 2) as behind:
        await before_the_cut(writer)
        await behind.follow(writer)
        await missed(writer, "tombstones")
        writer.store.expire_journal(2**62)
        calls: list[int] = []
        changes = partitions_module.cluster_changes

        def failing_once(*args: Any) -> Any:
            calls.append(len(calls))
            if len(calls) == 1:
                raise RuntimeError("dictionary changed size during iteration")
            return changes(*args)

        monkeypatch.setattr(partitions_module, "cluster_changes", failing_once)
        await behind.follow(writer)
        assert calls == [0, 1]
        async with node(open_store, 3) as fresh:
            assert await behind.state() == await fresh.state()


async def test_a_node_following_the_journal_builds_images_of_what_changed_only(
    open_store: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node builds its first topics images with its load of the cluster log (its registry's
    and its committed copy's); following the journal afterwards, each image is built from the
    last one and the topic another node created, never from every topic again."""
    async with node(open_store, 1) as writer:
        await writer.rt.create_topics([NewTopic(name=f"t{i}", num_partitions=1) for i in range(5)])
        async with node(open_store, 2) as behind:
            with watching_the_reload(behind, monkeypatch) as seen:
                await writer.rt.create_topics([NewTopic(name="n", num_partitions=2)])
                await behind.follow(writer)
                image = behind.rt.committed.registry.image()
            assert seen.images == [["n"], ["n"]]  # the registry's, its committed copy's
            assert sorted(image.by_name) == ["n", "t0", "t1", "t2", "t3", "t4"]
            assert sorted(behind.rt.registry.image().by_name) == sorted(image.by_name)
