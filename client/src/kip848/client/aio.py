"""The asyncio group member: :class:`kip848.client.member.Member` driven over gRPC.

One driver task owns the sans-IO member: it calls ``tick`` when the member's next deadline is
due and sleeps otherwise. Every RPC, callback and push runs in its own task and reports back by
feeding the member an event on the loop (never concurrently: asyncio is single-threaded), and
the actions the member returns are started at once. Time is ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from kip848.v1 import (
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

from . import _wire
from .member import (
    Action,
    CallbackKind,
    FindCoordinator,
    InvokeCallback,
    Left,
    Member,
    MemberFailed,
    MemberState,
    SendHeartbeat,
    Subscription,
)
from .types import (
    CommitFailedError,
    ErrorCode,
    KafkaError,
    MemberFailedError,
    TopicPartition,
    error_name,
    partitions_of,
    to_topic_partitions,
    topic_id_from_bytes,
)

log = logging.getLogger("kip848.client")

Callback = Callable[[frozenset[TopicPartition]], "Awaitable[None] | None"]

CLIENT_ID_KEY = "client-id"
GROUP_KEY_TYPE = 0

# gRPC's own reconnect back-off starts at 1 s and grows to 120 s: far too slow for a member
# whose coordinator restarts. Ours (retry_backoff_ms..retry_backoff_max_ms) drives the retries.
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.enable_retries", 0),
)

_COORDINATOR_MOVED = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
_COMMIT_RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_SERVER_ERROR,
}


def split_target(target: str) -> list[str]:
    """The gRPC targets coordinator lookups go to, one after another: each address of an
    ``ipv4:``/``ipv6:`` list on its own (a node that hangs — stopped, partitioned — then holds
    up one lookup, not every one, as gRPC's own balancing would let it); any other target
    whole."""
    scheme, sep, rest = target.partition(":")
    if not sep or scheme not in ("ipv4", "ipv6") or "," not in rest:
        return [target]
    return [f"{scheme}:{address}" for address in rest.split(",") if address]


def new_member_id() -> str:
    """A random member id in Kafka's text form (what Kafka's clients generate, KIP-1082)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class GroupMember:
    """A member of consumer group ``group_id`` on the coordinator at ``target`` ("host:port").

    Subscribe with ``topics`` (names), ``pattern`` (an RE2 regular expression matched in full
    against topic names by the coordinator), or both. Callbacks receive a frozenset of
    :class:`TopicPartition`; they may be plain functions (run on the event loop: keep them
    short) or coroutine functions (awaited; heartbeats go on meanwhile). The callback contract
    is in docs/client.md and :mod:`kip848.client`.

    Use ``async with GroupMember(...) as member:`` or ``await member.start()`` /
    ``await member.close()``.
    """

    def __init__(
        self,
        target: str,
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        instance_id: str | None = None,
        rack_id: str | None = None,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        client_id: str = "kip848-python",
        member_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        find_coordinator: bool = True,
        push: bool = True,
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5_000,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Iterable[tuple[str, Any]] = (),
        token: str | Callable[[], str] | None = None,
    ) -> None:
        if isinstance(topics, str):
            raise TypeError("topics is a list of topic names, not one string")
        subscription = Subscription(
            topics=None if topics is None else tuple(topics), pattern=pattern
        )
        self.target = target
        self.group_id = group_id
        self.client_id = client_id
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.on_lost = on_lost
        self.find_coordinator = find_coordinator
        self.push = push
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self._credentials = credentials
        self._channel_options = (*DEFAULT_CHANNEL_OPTIONS, *channel_options)
        self._client_metadata = ((CLIENT_ID_KEY, client_id),)
        self._token = token
        self._member = Member(
            group_id=group_id,
            member_id=member_id or new_member_id(),
            subscription=subscription,
            instance_id=instance_id,
            rack_id=rack_id,
            server_assignor=server_assignor,
            rebalance_timeout_ms=rebalance_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self._request_timeout_s = request_timeout_ms / 1000
        self._started = False
        self._closed = False
        self._closing = False  # close() was called
        self._driver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self._wake: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._left: asyncio.Event | None = None
        self._bootstrap: grpc.aio.Channel | None = None
        self._lookup_targets = split_target(target)
        """Where the coordinator is looked up: one node after another (module docstring)."""
        self._lookup_index = 0
        self._coordinator: grpc.aio.Channel | None = None
        self._coordinator_address: str | None = None
        self._stored: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self.failure: MemberFailedError | None = None
        self.push_supported: bool | None = None
        """None until known; False once the coordinator answered UNIMPLEMENTED to the push
        stream (the member then relies on its heartbeats alone)."""
        self.pushes = 0  # push messages received
        self._watch: asyncio.Task[None] | None = None
        self._watch_key: tuple[str, str] | None = None

    # ------------------------------------------------------------------ views

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def member_epoch(self) -> int:
        return self._member.member_epoch

    @property
    def state(self) -> MemberState:
        return self._member.state

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now (see the callback contract)."""
        return to_topic_partitions(self._member.owned, self._member.topic_names)

    @property
    def pending(self) -> frozenset[TopicPartition]:
        """Partitions of the member's target still held by their previous owners."""
        return to_topic_partitions(self._member.pending, self._member.topic_names)

    @property
    def sans_io(self) -> Member:
        """The protocol state machine this client drives (read it, do not feed it)."""
        return self._member

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Join the group (returns at once; see :meth:`wait_joined`)."""
        if self._started:
            raise RuntimeError("a GroupMember starts once")
        self._started = True
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._left = asyncio.Event()
        self._bootstrap = self._channel(self._lookup_targets[0])
        self._feed(self._member.join)
        self._driver = asyncio.create_task(self._drive(), name=f"kip848-member-{self.member_id}")
        if self.enable_auto_commit:
            self._spawn(self._auto_commit_loop(), "auto-commit")

    async def close(
        self,
        *,
        leave_group: bool | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - Kafka's close(timeout): a bounded leave
    ) -> None:
        """Leave the group: on_revoked for every owned partition (then, with auto-commit, their
        stored offsets are committed), then the leave heartbeat (epoch -1; -2 for a static
        member unless ``leave_group`` is True); a member that failed sends nothing but lets its
        running on_lost return. Waits up to ``timeout`` seconds, then stops anyway (cancelling
        a callback still running; the coordinator expires the member after its session
        timeout)."""
        if not self._started or self._closed:
            return
        if asyncio.current_task() in self._callback_tasks:
            raise RuntimeError(
                "close() from a rebalance callback would wait for that callback to return; "
                "close the member after the callback (e.g. in another task)"
            )
        assert self._left is not None
        self._closing = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                if self._member.failure is None:
                    self._feed(lambda now: self._member.leave(now, leave_group=leave_group))
                    await self._left.wait()
                # A failed member's on_lost (or an on_revoked the failure found running) has
                # started: let it return rather than cancel it in the middle.
                while self._callback_tasks:
                    await asyncio.wait(set(self._callback_tasks))
        self._closed = True
        await self._stop()

    async def _stop(self) -> None:
        tasks = [t for t in (self._driver, self._watch, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for channel in {self._coordinator, self._bootstrap}:
            if channel is not None:
                await channel.close()
        self._notify()

    async def wait_joined(self) -> None:
        """Until the coordinator accepted the member (it has a member epoch). Bound it with
        ``asyncio.timeout``, like every wait."""
        await self.wait_until(lambda: self._member.member_epoch > 0)

    async def wait_stable(self) -> None:
        """Until the member owns exactly its latest assignment and has acknowledged it."""
        await self.wait_until(lambda: self._member.state is MemberState.STABLE)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Until ``predicate()`` holds (checked after every protocol event); raises
        :class:`MemberFailedError` if the member failed."""
        if self._changed is None:
            raise RuntimeError("start() the member first")
        while True:
            changed = self._changed
            if predicate():
                return
            if self.failure is not None:
                raise self.failure
            if self._closed:
                raise RuntimeError("the member is closed")
            await changed.wait()

    async def update_subscription(
        self, topics: Iterable[str] | None = None, pattern: str | None = None
    ) -> None:
        """Subscribe to other topics / another pattern (sent with the next heartbeat, at once;
        before :meth:`start`, the join carries it). Raises :class:`MemberFailedError` once the
        member failed, ``RuntimeError`` once :meth:`close` was called."""
        if isinstance(topics, str):
            raise TypeError("topics is a list of topic names, not one string")
        sub = Subscription(topics=None if topics is None else tuple(topics), pattern=pattern)
        if self.failure is not None:
            raise self.failure
        if self._closing:
            raise RuntimeError("the member is closed")
        self._feed(lambda now: self._member.update_subscription(sub, now))

    # ------------------------------------------------------------------ offsets

    def store_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Remember the next offsets to consume; with ``enable_auto_commit`` they are committed
        every ``auto_commit_interval_ms``, after on_revoked and on close."""
        self._stored.update(offsets)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        metadata: str | None = None,
        timeout: float = 60.0,  # noqa: ASYNC109 - Kafka's default.api.timeout.ms bound
    ) -> None:
        """Commit ``offsets`` (default: the stored offsets of owned partitions) with this
        member's epoch. Only partitions the member owns may be committed. STALE_MEMBER_EPOCH
        is retried once the member's epoch changed; coordinator errors and lost connections
        are retried with back-off. Raises :class:`CommitFailedError` (per-partition codes in
        ``errors``) when it cannot succeed within ``timeout`` seconds."""
        if offsets is None:
            owned = self.assignment
            offsets = {tp: o for tp, o in self._stored.items() if tp in owned}
        if not offsets:
            return
        await self._commit(dict(offsets), metadata, timeout)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        metadata: str | None = None,
        timeout: float = 60.0,
    ) -> asyncio.Task[None]:
        """:meth:`commit` in a task (await it or add a done callback for the outcome)."""
        return asyncio.ensure_future(self.commit(offsets, metadata=metadata, timeout=timeout))

    async def committed(
        self,
        partitions: Iterable[TopicPartition],
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - Kafka's default.api.timeout.ms bound
    ) -> dict[TopicPartition, int]:
        """The committed offset of each partition (-1: none), read as this member."""
        partitions = list(partitions)
        request = offsets_pb2.OffsetFetchRequest()
        group = request.groups.add(group_id=self.group_id)
        member = self._member
        if member.in_group:
            group.member_id = member.member_id
            group.member_epoch = member.member_epoch
        group.topics.SetInParent()
        by_topic: dict[tuple[str, str], list[int]] = {}
        for tp in partitions:
            by_topic.setdefault((tp.topic_id, tp.topic), []).append(tp.partition)
        for (topic_id, name), parts in by_topic.items():
            group.topics.items.add(
                name="" if topic_id else name,
                topic_id=_wire.id_bytes(topic_id),
                partition_indexes=sorted(parts),
            )
        async with asyncio.timeout(timeout):
            while True:
                try:
                    stub = offsets_pb2_grpc.OffsetServiceStub(self._channel_for_calls())
                    resp = await stub.OffsetFetch(
                        request, timeout=self._request_timeout_s, metadata=self._metadata()
                    )
                except grpc.aio.AioRpcError as exc:
                    log.info("OffsetFetch failed (%s); retrying", exc.code().name)
                    await asyncio.sleep(self._member.retry_backoff_ms / 1000)
                    continue
                code = resp.error_code or (resp.groups[0].error_code if resp.groups else 0)
                if code in _COMMIT_RETRIABLE:
                    await asyncio.sleep(self._member.retry_backoff_ms / 1000)
                    continue
                if code:
                    raise KafkaError(code, resp.groups[0].error_message if resp.groups else None)
                found: dict[tuple[str, str, int], int] = {}
                for topic in resp.groups[0].topics:
                    tid = (
                        _wire.topic_id_from_bytes(topic.topic_id)
                        if len(topic.topic_id) == 16
                        else ""
                    )
                    for p in topic.partitions:
                        found[(tid, "", p.partition_index)] = p.committed_offset
                        found[("", topic.name, p.partition_index)] = p.committed_offset
                return {
                    tp: found.get((tp.topic_id, "" if tp.topic_id else tp.topic, tp.partition), -1)
                    for tp in partitions
                }

    async def _commit(
        self, offsets: dict[TopicPartition, int], metadata: str | None, timeout_s: float
    ) -> None:
        """Commit until every partition succeeded or failed for good; ``errors`` holds the
        latest error of each partition not (yet) committed."""
        errors: dict[TopicPartition, tuple[int, str]] = {}
        backoff = self._member.retry_backoff_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                while offsets:
                    owned = self.assignment
                    for tp in [tp for tp in offsets if not _owns(owned, tp)]:
                        del offsets[tp]
                        errors[tp] = (
                            ErrorCode.STALE_MEMBER_EPOCH,
                            f"{tp} is not owned by this member (revoked or lost)",
                        )
                    if not offsets:
                        break
                    member = self._member
                    epoch = member.member_epoch
                    request = _wire.offset_commit_request(
                        group_id=self.group_id,
                        member_id=member.member_id,
                        member_epoch=epoch,
                        instance_id=member.instance_id,
                        offsets=offsets,
                        metadata=metadata,
                    )
                    channel = self._channel_for_calls()
                    try:
                        stub = offsets_pb2_grpc.OffsetServiceStub(channel)
                        resp = await stub.OffsetCommit(
                            request, timeout=self._request_timeout_s, metadata=self._metadata()
                        )
                    except grpc.aio.AioRpcError as exc:
                        log.info(
                            "member %s: OffsetCommit failed (%s); retrying",
                            member.member_id,
                            exc.code().name,
                        )
                        if channel is self._channel_for_calls():  # not moved on meanwhile
                            self._feed(self._member.coordinator_unknown)
                        await asyncio.sleep(backoff)
                        continue
                    stale = retry = moved = False
                    for tp, (code, message) in _wire.offset_commit_errors(resp, offsets).items():
                        if code == ErrorCode.NONE:
                            self._committed[tp] = offsets.pop(tp)
                            errors.pop(tp, None)
                            continue
                        errors[tp] = (code, message)
                        if code == ErrorCode.STALE_MEMBER_EPOCH:
                            stale = True
                        elif code in _COMMIT_RETRIABLE:
                            retry = True
                            moved = moved or code in _COORDINATOR_MOVED
                        else:
                            del offsets[tp]  # failed for good
                    if stale:
                        log.info(
                            "member %s: commit answered STALE_MEMBER_EPOCH at epoch %d; "
                            "retrying once the member's epoch changes",
                            member.member_id,
                            epoch,
                        )
                        # KIP-848 "Offset Commit and Fetch": the coordinator moved the member's
                        # epoch on; retry once this member has learned its new epoch.
                        await self._wait_epoch_change(epoch)
                    elif retry:
                        if moved and channel is self._channel_for_calls():
                            # Find the coordinator again, as the heartbeats would.
                            self._feed(self._member.coordinator_unknown)
                        await asyncio.sleep(backoff)
        except TimeoutError:
            for tp in offsets:
                errors.setdefault(tp, (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no answer in time"))
        if errors:
            first = min(errors)
            code, message = errors[first]
            raise CommitFailedError(
                code,
                f"{len(errors)} partition(s) not committed, e.g. {first}: {message}",
                {tp: c for tp, (c, _m) in errors.items()},
            )

    async def _wait_epoch_change(self, epoch: int) -> None:
        await self.wait_until(lambda: self._member.member_epoch != epoch)

    async def _commit_stored(self, partitions: Iterable[TopicPartition]) -> None:
        offsets = {
            tp: self._stored[tp]
            for tp in partitions
            if tp in self._stored and self._committed.get(tp) != self._stored[tp]
        }
        if offsets:
            try:
                await self._commit(offsets, None, self._request_timeout_s)
            except CommitFailedError as exc:
                log.warning("auto-commit of %d partition(s) failed: %s", len(offsets), exc)

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_ms / 1000)
            if self._member.in_group:
                await self._commit_stored(self.assignment)

    # ------------------------------------------------------------------ the driver

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """Each call's metadata: the client id, and the bearer token (``token``: a string, or a
        function giving the current one, e.g. re-read from a file as it is renewed)."""
        token = self._token
        if token is None:
            return self._client_metadata
        value = token() if callable(token) else token
        return (*self._client_metadata, ("authorization", f"Bearer {value}"))

    def _channel(self, address: str) -> grpc.aio.Channel:
        if self._credentials is not None:
            return grpc.aio.secure_channel(address, self._credentials, self._channel_options)
        return grpc.aio.insecure_channel(address, self._channel_options)

    def _channel_for_calls(self) -> grpc.aio.Channel:
        channel = self._coordinator or self._bootstrap
        if channel is None:
            raise RuntimeError("start() the member first")
        return channel

    def _spawn(self, coro: Awaitable[Any], what: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"kip848-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _feed(self, event: Callable[[int], list[Action]], *, wake: bool = True) -> None:
        """Give the member one event (at the current time) and start what it asks for; wake
        the driver, whose next deadline may have changed."""
        try:
            actions = event(_now_ms())
        except Exception:
            log.exception("member %s: protocol state machine failed", self.member_id)
            raise
        for action in actions:
            self._start(action)
        if wake and self._wake is not None:
            self._wake.set()
        self._notify()
        self._sync_watch()

    def _notify(self) -> None:
        """Wake every wait_until (each waits on the event current when it checked)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _start(self, action: Action) -> None:
        if isinstance(action, SendHeartbeat):
            self._spawn(self._heartbeat(action), "heartbeat")
        elif isinstance(action, FindCoordinator):
            self._spawn(self._find(action.seq), "find-coordinator")
        elif isinstance(action, InvokeCallback):
            task = self._spawn(self._callback(action), action.kind.value)
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)
        elif isinstance(action, Left):
            assert self._left is not None
            self._left.set()
        elif isinstance(action, MemberFailed):
            self.failure = MemberFailedError(action.error_code, action.error_message)
            log.error("member %s failed: %s", self.member_id, self.failure)
            assert self._left is not None
            self._left.set()

    async def _drive(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            self._feed(self._member.tick, wake=False)
            deadline = self._member.next_deadline_ms()
            delay = None if deadline is None else max(0, deadline - _now_ms()) / 1000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    async def _heartbeat(self, action: SendHeartbeat) -> None:
        request = _wire.heartbeat_request_to_proto(action.request)
        channel = self._coordinator or self._bootstrap
        assert channel is not None
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        try:
            resp = await stub.ConsumerGroupHeartbeat(
                request, timeout=self._request_timeout_s, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            log.info(
                "member %s: heartbeat failed (%s: %s)",
                self.member_id,
                exc.code().name,
                exc.details(),
            )
            self._feed(lambda now: self._member.heartbeat_failed(action.seq, now))
            return
        if resp.error_code:
            log.info(
                "member %s: heartbeat answered %s: %s",
                self.member_id,
                error_name(resp.error_code),
                resp.error_message,
            )
        converted = _wire.heartbeat_response_from_proto(resp)
        self._feed(lambda now: self._member.heartbeat_response(action.seq, converted, now))

    async def _find(self, seq: int) -> None:
        assert self._bootstrap is not None
        if not self.find_coordinator:
            self._use_coordinator(self.target)
            self._feed(lambda now: self._member.coordinator_found(seq, now))
            return
        stub = classic_group_pb2_grpc.ClassicGroupServiceStub(self._bootstrap)
        request = classic_group_pb2.FindCoordinatorRequest(
            key_type=GROUP_KEY_TYPE, coordinator_keys=[self.group_id]
        )
        try:
            resp = await stub.FindCoordinator(
                request, timeout=self._request_timeout_s, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._use_coordinator(self.target)  # no lookup served: the target is it
                self._feed(lambda now: self._member.coordinator_found(seq, now))
                return
            log.info(
                "member %s: FindCoordinator failed (%s: %s)",
                self.member_id,
                exc.code().name,
                exc.details(),
            )
            self._next_lookup_target()
            self._feed(lambda now: self._member.coordinator_lookup_failed(seq, now))
            return
        entry = next((c for c in resp.coordinators if c.key == self.group_id), None)
        code = entry.error_code if entry is not None else resp.error_code
        if entry is None or code:
            log.info(
                "member %s: FindCoordinator answered %s", self.member_id, error_name(code or -1)
            )
            self._feed(lambda now: self._member.coordinator_lookup_failed(seq, now))
            return
        host = f"[{entry.host}]" if ":" in entry.host else entry.host  # an IPv6 address
        self._use_coordinator(f"{host}:{entry.port}")
        self._feed(lambda now: self._member.coordinator_found(seq, now))

    def _next_lookup_target(self) -> None:
        """A lookup got no answer: the next one asks the next node the target names."""
        if len(self._lookup_targets) < 2:
            return
        self._lookup_index = (self._lookup_index + 1) % len(self._lookup_targets)
        old = self._bootstrap
        self._bootstrap = self._channel(self._lookup_targets[self._lookup_index])
        if old is not None and old is not self._coordinator:
            self._spawn(old.close(grace=self._request_timeout_s), "close-channel")

    def _use_coordinator(self, address: str) -> None:
        if address == self._coordinator_address:
            return
        log.info("member %s: the coordinator is %s", self.member_id, address)
        old = self._coordinator
        if address == self.target:
            self._coordinator = self._bootstrap
        else:
            self._coordinator = self._channel(address)
        self._coordinator_address = address
        if old is not None and old is not self._bootstrap:
            # Calls still on it (a commit, a heartbeat) finish or time out, never cancelled.
            self._spawn(old.close(grace=self._request_timeout_s), "close-channel")

    def _sync_watch(self) -> None:
        """Keep the push stream open while the member is in the group, on its coordinator."""
        member = self._member
        wanted = (
            self.push
            and self.push_supported is not False
            and not self._closed
            and member.in_group
            and self._coordinator_address is not None
        )
        key = (self._coordinator_address or "", member.member_id) if wanted else None
        if key == self._watch_key:
            return
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._watch_key = key
        if key is not None:
            self._watch = asyncio.ensure_future(self._watch_stream(key))

    async def _watch_stream(self, key: tuple[str, str]) -> None:
        """ConsumerGroupWatch: each message is fed to the member (``push``). A stream that
        breaks or ends is opened again after a back-off; heartbeats carry on meanwhile."""
        request = consumer_group_pb2.ConsumerGroupWatchRequest(
            group_id=self.group_id, member_id=key[1]
        )
        backoff = self._member.retry_backoff_max_ms / 1000
        while self._watch_key == key:
            channel = self._coordinator
            assert channel is not None
            stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
            try:
                async for msg in stub.ConsumerGroupWatch(request, metadata=self._metadata()):
                    self.pushes += 1
                    if msg.error_code:
                        log.debug(
                            "member %s: push stream ended with %s",
                            key[1],
                            error_name(msg.error_code),
                        )
                        self._feed(self._member.push)  # the heartbeat tells what happened
                        break
                    self.push_supported = True
                    target = _watch_partitions(msg.target_topic_partitions)
                    released = _watch_partitions(msg.released_topic_partitions)
                    for tp in (*msg.target_topic_partitions, *msg.released_topic_partitions):
                        if tp.topic_name:
                            self._member.topic_names[topic_id_from_bytes(tp.topic_id)] = (
                                tp.topic_name
                            )
                    due = msg.group_epoch > msg.assignment_epoch
                    self._feed(
                        lambda now, t=target, r=released, d=due: self._member.push(  # type: ignore[misc]
                            now, target=t, released=r, assignment_due=d
                        )
                    )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("member %s: the coordinator does not push; heartbeats only", key[1])
                    self.push_supported = False
                    self._watch_key = None
                    return
                log.debug("member %s: push stream broke (%s)", key[1], exc.code().name)
                if self._watch_key == key:
                    self._feed(self._member.push)  # its coordinator may be gone: ask now
            await asyncio.sleep(backoff)

    async def _callback(self, action: InvokeCallback) -> None:
        partitions = to_topic_partitions(action.partitions, self._member.topic_names)
        fn = {
            CallbackKind.ASSIGNED: self.on_assigned,
            CallbackKind.REVOKED: self.on_revoked,
            CallbackKind.LOST: self.on_lost,
        }[action.kind]
        try:
            if fn is not None:
                result = fn(partitions)
                if inspect.isawaitable(result):
                    await result
        except (Exception, asyncio.CancelledError) as exc:
            # A CancelledError this task was not asked for: the callback awaited something the
            # application cancelled (a worker task). It raised, as far as the member cares.
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # close() cancelled the callback
            log.exception(
                "member %s: %s raised (the partitions are treated as handled)",
                self.member_id,
                action.kind.value,
            )
        if action.kind is CallbackKind.REVOKED and self.enable_auto_commit:
            await self._commit_stored(partitions)
        if action.kind is not CallbackKind.ASSIGNED:
            for tp in partitions:
                self._stored.pop(tp, None)
                self._committed.pop(tp, None)
        self._feed(lambda now: self._member.callback_done(action.token, now))


# ---------------------------------------------------------------------- push


def _watch_partitions(items: Iterable[Any]) -> dict[str, frozenset[int]]:
    return partitions_of((topic_id_from_bytes(tp.topic_id), tp.partitions) for tp in items)


def _owns(owned: frozenset[TopicPartition], tp: TopicPartition) -> bool:
    if tp.topic_id:
        return tp in owned
    return any(o.topic == tp.topic and o.partition == tp.partition for o in owned)


__all__ = ["Callback", "GroupMember", "new_member_id"]
