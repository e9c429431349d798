"""Topics follow the upstream (``--kafka-upstream``): the coordinator's topic registry is fed
from the broker's Metadata — names, partition counts, topic ids, and each partition's replica
racks (its replicas' node ids resolved to the racks of the brokers the same answer lists; for
rack-aware assignment); Kafka's metadata image.

* **Refresh**: a Metadata request for every topic, its answer decoded and planned against
  the registry on a thread and the changes applied on the loop a bounded number a step
  (``CoordinatorRuntime.follow_topic_snapshot``; ordinary topic records: replay is
  unchanged).
  Topics gone from the broker, or re-created there with a new id, are deleted here with their
  committed offsets; a topic the broker lists with an error is left as it is. Refreshes run
  every ``kafka.upstream.metadata.max.age.ms``, at start (before health says SERVING), and on
  demand — when a subscription, an offset commit or a forwarded Metadata answer names a topic
  the registry does not have (by name or id), when a regex is seen for the first time (that
  request, or answer, waits for the refresh, bounded; a topic still unknown after it is not
  looked up again for ``kafka.upstream.metadata.max.age.ms``: no refresh storm under a flood
  of unknown names), after a forwarded
  CreateTopics/DeleteTopics/CreatePartitions (its answer is held until the registry has the
  change, bounded: the client's next request sees the topic here, as on Kafka), and before the
  topic RPCs answer. On-demand refreshes are coalesced and at most one starts per
  ``MIN_REFRESH_GAP_S``; a request that arrives while one is in flight gets the next one.
* **Topic administration** (the AdminService topic RPCs, ``kip848 topics``) goes to the
  upstream: the broker owns topics. CreateTopics/DeleteTopics/CreatePartitions are sent to it
  with Kafka's request checks first (names, duplicates, partition counts; a topic id cannot be
  chosen — the broker mints it); each topic gets the broker's answer, and the registry is
  refreshed before the RPC answers, so what it reports is what the coordinator uses.
* The feed also tells the listener about the upstream's brokers (``Upstream.update_brokers``):
  a broker that joins later gets a listener port of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    InvalidPartitionsError,
    InvalidRequestError,
)
from coordinator.core.model import ZERO_TOPIC_ID, PartitionRacks, make_partition_racks
from coordinator.core.topics import NewTopic, SnapshotChanges, TopicResult, check_topic_name
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.collector import free_gradually

from .. import wire
from ..convert import topic_id_of
from .broker import METADATA_VERSION_CAP, Upstream, UpstreamError

log = logging.getLogger("kip848.kafka")

DEFAULT_MAX_AGE_MS = 10_000
MIN_REFRESH_GAP_S = 0.2
START_TIMEOUT_S = 10.0
ADMIN_TIMEOUT_MS = 30_000  # the topic RPCs' timeout given to the broker, unless they name one
KNOWN_REGEXES = 1024  # regexes remembered (a new one triggers a refresh)
KNOWN_MISSING = 4096  # missing topic names remembered (a request waits once per interval)
SUBSCRIBE_WAIT_S = 1.0
ANSWER_RECHECK_S = 1.0  # a topic a broker's answer lists, unknown here: looked up this often
SETTLE_WAIT_S = 5.0  # a forwarded topic change is answered once refreshed, or after this

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
API_NAMES = {
    CREATE_TOPICS: "CreateTopics",
    DELETE_TOPICS: "DeleteTopics",
    CREATE_PARTITIONS: "CreatePartitions",
}


NETWORK_EXCEPTION = 13


class UpstreamUnavailableError(CoordinatorError):
    """The upstream broker could not be asked (Kafka's NETWORK_EXCEPTION)."""

    code = cast(ErrorCode, NETWORK_EXCEPTION)
    default_message = "The upstream broker cannot be reached."


def _code(value: int) -> ErrorCode:
    """The broker's error code as it is (it may be one the core has no name for)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return cast(ErrorCode, int(value))


def _failed(name: str, exc: CoordinatorError) -> TopicResult:
    return TopicResult(name=name, error_code=exc.code, error_message=exc.message)


def _unsupported(name: str, key: int) -> TopicResult:
    return TopicResult(
        name=name,
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        error_message=f"The upstream broker does not offer {API_NAMES[key]} (API key {key}).",
    )


def _duplicates(names: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    return {n for n in names if n in seen or seen.add(n)}  # type: ignore[func-returns-value]


class TopicFeed:
    """The registry fed from the upstream, and topic administration sent to it (module doc).
    Implements the service layer's ``TopicSource``."""

    watches_subscriptions = True

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        upstream: Upstream,
        max_age_ms: int = DEFAULT_MAX_AGE_MS,
    ) -> None:
        self.runtime = runtime
        self.upstream = upstream
        self.client = upstream.client
        self.max_age_s = max_age_ms / 1000
        self._wanted: asyncio.Event | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._last_start = 0.0
        self._regexes: dict[str, None] = {}
        self._missing: dict[tuple[str, str], float] = {}  # ("name"|"id", value) -> asked at
        self._listed: dict[tuple[str, str], float] = {}  # the same, for forwarded answers
        self._settling: set[asyncio.Task[None]] = set()
        self.refreshes = 0
        self.last_error: str | None = None
        upstream.on_topics_changed = self.settle_then
        upstream.on_topics_named = self.hold_answer

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """The first refresh (bounded: the stored registry serves meanwhile), then the loop."""
        self._wanted = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            await asyncio.wait_for(self.refresh(), START_TIMEOUT_S)
        except (UpstreamError, CoordinatorError, TimeoutError) as exc:
            log.warning("First topic refresh from the upstream failed (%s); retrying.", exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for w in self._waiters:
            if not w.done():
                w.set_exception(UpstreamError("the coordinator is shutting down"))
        self._waiters.clear()
        self.client.close()

    # ------------------------------------------------------------ refreshing

    def settle_then(self, deliver: Callable[[], None]) -> None:
        """A forwarded CreateTopics/DeleteTopics/CreatePartitions was answered by the broker:
        refresh, then ``deliver`` the answer (after at most ``SETTLE_WAIT_S``, refreshed or
        not), so the client's next request sees the change here too, as it would on Kafka."""
        if self._wanted is None:
            deliver()
            return
        task = asyncio.get_running_loop().create_task(self._settled(deliver))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settled(self, deliver: Callable[[], None]) -> None:
        try:
            await asyncio.wait_for(self.refresh(), SETTLE_WAIT_S)
        except (UpstreamError, CoordinatorError, TimeoutError) as exc:
            log.warning("Answering a topic change before the registry has it: %s", exc)
        finally:
            deliver()

    async def refresh(self) -> None:
        """Refresh now (or right after the one in flight) and wait until it is applied.
        Raises what the refresh raised (UpstreamError, CoordinatorError)."""
        if self._wanted is None:
            raise UpstreamError("the topic feed is not running")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wanted.set()
        await waiter

    def subscribed(self, names: Sequence[str] | None, regex: str | None) -> Awaitable[None] | None:
        """A subscription was seen. If it names a topic the registry lacks (see
        :meth:`lookup`), or carries a regex not seen before (it may match topics created since
        the last refresh), a refresh is asked for, and the returned awaitable waits for it (at
        most ``SUBSCRIBE_WAIT_S``): a consumer that subscribes right after creating its topic is
        assigned at once, as with Kafka, whose coordinator shares the broker's metadata."""
        wait = self._unknown(names or (), ())
        if regex and regex not in self._regexes:
            if len(self._regexes) >= KNOWN_REGEXES:
                self._regexes.pop(next(iter(self._regexes)))
            self._regexes[regex] = None
            wait = True
        return self._refreshed() if wait else None

    def lookup(self, names: Iterable[str], topic_ids: Iterable[str]) -> Awaitable[None] | None:
        """A request (an offset commit) or a forwarded answer (Metadata) names topics: if the
        registry lacks one of them (by name or by id), the returned awaitable waits for a
        refresh from the upstream (at most ``SUBSCRIBE_WAIT_S``), so a commit right after the
        broker auto-created its topic finds it here, as on Kafka, whose coordinator shares the
        broker's metadata; None when there is nothing to look up."""
        return self._refreshed() if self._unknown(names, topic_ids) else None

    def _unknown(
        self,
        names: Iterable[str],
        topic_ids: Iterable[str],
        seen: dict[tuple[str, str], float] | None = None,
        horizon_s: float | None = None,
    ) -> bool:
        """Does any of these names or ids, unknown to the registry, want a refresh? Each one
        does at most once per ``horizon_s`` (default ``kafka.upstream.metadata.max.age.ms``: a
        negative answer is remembered in ``seen``, the oldest forgotten first beyond
        ``KNOWN_MISSING``); refreshes themselves are coalesced, at most one per
        ``MIN_REFRESH_GAP_S``: a flood of unknown names costs a few refreshes a second, never
        one each."""
        if seen is None:
            seen = self._missing
        if horizon_s is None:
            horizon_s = self.max_age_s
        image = self.runtime.registry.image()
        missing = [("name", n) for n in names if n and n not in image.by_name]
        missing += [
            ("id", t) for t in topic_ids if t and t != ZERO_TOPIC_ID and t not in image.by_id
        ]
        if not missing:
            return False
        now = time.monotonic()
        wait = False
        for key in missing:
            at = seen.get(key)
            if at is not None and now - at < horizon_s:
                continue
            seen.pop(key, None)
            seen[key] = now
            wait = True
            while len(seen) > KNOWN_MISSING:
                seen.pop(next(iter(seen)))
        return wait

    def hold_answer(self, named: Sequence[tuple[str, str]], deliver: Callable[[], None]) -> None:
        """A forwarded Metadata answer lists ``named`` ((name, topic id) pairs) without error:
        topics that exist on the broker. Deliver it once the registry has looked up those it
        lacks (bounded), else at once. The broker's word beats a remembered negative answer:
        such a topic is looked up again after ``ANSWER_RECHECK_S`` (a topic the registry never
        takes in, such as one without an id, costs at most that)."""
        names = [n for n, _ in named]
        ids = [t for _, t in named]
        if self._wanted is None or not self._unknown(names, ids, self._listed, ANSWER_RECHECK_S):
            deliver()
            return
        waiting = self._refreshed()

        async def held() -> None:
            try:
                await waiting
            finally:
                deliver()

        task = asyncio.get_running_loop().create_task(held())
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _refreshed(self) -> None:
        try:
            await asyncio.wait_for(self.refresh(), SUBSCRIBE_WAIT_S)
        except (UpstreamError, CoordinatorError, TimeoutError) as exc:
            log.debug("Serving a subscription without a refresh: %r", exc)

    async def _run(self) -> None:
        wanted = self._wanted
        assert wanted is not None
        while True:
            try:
                await asyncio.wait_for(wanted.wait(), self.max_age_s)
            except TimeoutError:
                pass
            gap = self._last_start + MIN_REFRESH_GAP_S - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)
            wanted.clear()
            waiters, self._waiters = self._waiters, []
            self._last_start = time.monotonic()
            error: BaseException | None = None
            try:
                await self._refresh_once()
                if self.last_error is not None:
                    log.info("Topic refresh from the upstream works again.")
                self.last_error = None
            except (UpstreamError, CoordinatorError) as exc:
                error = exc
                if str(exc) != self.last_error:
                    log.warning("Topic refresh from the upstream failed: %s", exc)
                self.last_error = str(exc)
            except Exception as exc:  # a bug: keep the feed alive, say it loudly
                error = exc
                log.exception("Topic refresh from the upstream failed unexpectedly")
            for w in waiters:
                if not w.done():
                    if error is None:
                        w.set_result(None)
                    else:
                        w.set_exception(error)

    async def _refresh_once(self) -> None:
        """One refresh: the upstream's Metadata of every topic, decoded, turned into a
        snapshot (:func:`snapshot_of`) and planned against the registry on a thread, where
        all of it is freed (``CoordinatorRuntime.follow_topic_snapshot``): only the plan
        comes back to the loop, nothing when nothing changed. At 100,000 topics the decoding
        took the loop 0.7-1 s, the snapshot 0.9 s, their freeing 70 ms (freed on the thread
        a slice at a time: ``collector.free_gradually``)."""
        if self.runtime.state is not RuntimeState.ACTIVE:
            raise CoordinatorError(f"the coordinator is {self.runtime.state.value}")
        version = self.upstream.version_for(3, METADATA_VERSION_CAP)
        assert version is not None  # checked when the upstream was connected
        frame, pos = await self.client.call(
            wire.build(
                wire.request_class(3, version),
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
            decode=False,
        )
        self.refreshes += 1
        brokers: list[Any] = []

        def snapshot() -> tuple[list[NewTopic], list[str]]:
            meta = wire.decode_response(3, version, frame, pos)
            brokers[:] = meta.brokers
            decoded = list(meta.topics)
            try:
                return snapshot_of(meta)
            finally:
                del meta
                free_gradually(decoded)  # in one go: 25 ms of the loop at 100,000 topics

        try:
            changes = await self.runtime.follow_topic_snapshot(snapshot)
        finally:
            if brokers:
                self.upstream.update_brokers(_Brokers(brokers))
        _log_changes(changes)

    # ------------------------------------------------------------ topic administration

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> list[TopicResult]:
        dup = _duplicates([t.name for t in topics])
        answers: dict[int, TopicResult] = {}
        send: list[tuple[int, NewTopic]] = []
        for i, t in enumerate(topics):
            try:
                if t.name in dup:
                    raise InvalidRequestError(f"Duplicate topic name {t.name} in the request.")
                check_topic_name(t.name)
                if t.topic_id is not None:
                    raise InvalidRequestError(
                        "A topic id cannot be chosen in front of a broker (--kafka-upstream): "
                        "the broker assigns it."
                    )
                if t.partition_racks:
                    raise InvalidRequestError(
                        "Replica racks cannot be given in front of a broker (--kafka-upstream): "
                        "they come from the broker's metadata."
                    )
                if t.num_partitions < 1 and t.num_partitions != -1:
                    raise InvalidPartitionsError(
                        "Number of partitions was set to an invalid non-positive value."
                    )
                send.append((i, t))
            except CoordinatorError as exc:
                answers[i] = _failed(t.name, exc)
        version = self.upstream.version_for(CREATE_TOPICS)
        if version is None:
            answers.update((i, _unsupported(t.name, CREATE_TOPICS)) for i, t in send)
        elif send:
            req = wire.build(
                wire.request_class(CREATE_TOPICS, version),
                topics=[
                    {
                        "name": t.name,
                        "num_partitions": t.num_partitions,
                        "replication_factor": -1 if version >= 4 else 1,
                        "assignments": [],
                        "configs": [],
                    }
                    for _i, t in send
                ],
                timeout=ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                validate_only=validate_only,
            )
            resp = await self._call(req)
            by_name = {r.name: r for r in resp.topics}
            for i, t in send:
                r = by_name.get(t.name)
                if r is None:
                    answers[i] = TopicResult(
                        name=t.name,
                        error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                        error_message="The upstream broker did not answer for this topic.",
                    )
                    continue
                if r.error_code:
                    answers[i] = TopicResult(
                        name=t.name,
                        error_code=_code(r.error_code),
                        error_message=r.error_message,
                    )
                    continue
                answers[i] = TopicResult(
                    name=t.name,
                    topic_id=topic_id_of(getattr(r, "topic_id", None)),
                    num_partitions=max(0, getattr(r, "num_partitions", t.num_partitions)),
                )
            if not validate_only:
                await self._settle(answers)
        return [answers[i] for i in range(len(topics))]

    async def create_partitions(
        self,
        requests: Sequence[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        assignments: Mapping[str, int] | None = None,
    ) -> list[TopicResult]:
        if assignments:  # only a Kafka request has them, and it goes to the broker whole
            raise InvalidRequestError("Manual assignments are given to the broker directly.")
        dup = _duplicates([name for name, _c in requests])
        answers: dict[int, TopicResult] = {}
        send: list[tuple[int, str, int]] = []
        version = self.upstream.version_for(CREATE_PARTITIONS)
        for i, (name, count) in enumerate(requests):
            if name in dup:
                answers[i] = _failed(
                    name, InvalidRequestError(f"Duplicate topic name {name} in the request.")
                )
            elif version is None:
                answers[i] = _unsupported(name, CREATE_PARTITIONS)
            else:
                send.append((i, name, count))
        if send:
            assert version is not None
            resp = await self._call(
                wire.build(
                    wire.request_class(CREATE_PARTITIONS, version),
                    topics=[{"name": n, "count": c, "assignments": None} for _i, n, c in send],
                    timeout=ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                    validate_only=validate_only,
                )
            )
            by_name = {r.name: r for r in resp.results}
            for i, name, count in send:
                r = by_name.get(name)
                code = ErrorCode.UNKNOWN_SERVER_ERROR if r is None else _code(r.error_code)
                answers[i] = TopicResult(
                    name=name,
                    num_partitions=count if code == ErrorCode.NONE else 0,
                    error_code=code,
                    error_message=None
                    if code == ErrorCode.NONE
                    else (r.error_message if r is not None else "No answer from the upstream."),
                )
            if not validate_only:
                await self._settle(answers)
        return [answers[i] for i in range(len(requests))]

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> list[TopicResult]:
        dup = _duplicates(names)
        answers: dict[int, TopicResult] = {}
        send: list[tuple[int, str]] = []
        for i, name in enumerate(names):
            if name in dup:
                answers[i] = _failed(
                    name, InvalidRequestError(f"Duplicate topic name {name} in the request.")
                )
            else:
                send.append((i, name))
        version = self.upstream.version_for(DELETE_TOPICS)
        if version is None:
            answers.update((i, _unsupported(name, DELETE_TOPICS)) for i, name in send)
        elif send:
            before = {t.name: t for t in await self.runtime.list_topics()}
            if version >= 6:
                body: dict[str, Any] = {"topics": [{"name": n, "topic_id": None} for _i, n in send]}
            else:
                body = {"topic_names": [n for _i, n in send]}
            resp = await self._call(
                wire.build(
                    wire.request_class(DELETE_TOPICS, version),
                    body,
                    timeout=ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                )
            )
            by_name = {r.name: r for r in resp.responses}
            for i, name in send:
                r = by_name.get(name)
                code = ErrorCode.UNKNOWN_SERVER_ERROR if r is None else _code(r.error_code)
                old = before.get(name)
                if code == ErrorCode.NONE and old is not None:
                    answers[i] = old
                else:
                    message = None
                    if code != ErrorCode.NONE:
                        message = getattr(r, "error_message", None) or (
                            f"The upstream broker answered error {int(code)}."
                        )
                    answers[i] = TopicResult(name=name, error_code=code, error_message=message)
            await self._settle(answers)
        return [answers[i] for i in range(len(names))]

    async def list_topics(self) -> list[TopicResult]:
        """The registry, refreshed first (if the upstream cannot be reached: as it is)."""
        try:
            await self.refresh()
        except (UpstreamError, CoordinatorError) as exc:
            log.warning("Listing the topics without a refresh: %s", exc)
        return await self.runtime.list_topics()

    async def _call(self, entity: Any) -> Any:
        try:
            return await self.client.call(entity)
        except UpstreamError as exc:
            raise UpstreamUnavailableError(str(exc)) from None

    async def _settle(self, answers: dict[int, TopicResult]) -> None:
        """Refresh so the registry has the change before the RPC answers; fill the ids and
        partition counts of the successful answers from it."""
        try:
            await self.refresh()
        except (UpstreamError, CoordinatorError) as exc:
            log.warning("The registry learns of the change later: %s", exc)
        image = self.runtime.registry.image().by_name
        for i, a in list(answers.items()):
            t = image.get(a.name)
            if a.error_code == ErrorCode.NONE and t is not None and a.num_partitions >= 0:
                answers[i] = TopicResult(
                    name=a.name, topic_id=t.topic_id, num_partitions=t.num_partitions
                )


class _Brokers:
    """The brokers of a Metadata answer (``Upstream.update_brokers``)."""

    __slots__ = ("brokers",)

    def __init__(self, brokers: list[Any]) -> None:
        self.brokers = brokers


def snapshot_of(meta: Any) -> tuple[list[NewTopic], list[str]]:
    """A Metadata answer of every topic as the registry follows it: its topics (their ids,
    partition counts and replica racks), and the topics to keep as they are (listed with an
    error, or without partitions)."""
    rack_of = {int(b.node_id): b.rack for b in meta.brokers if getattr(b, "rack", None)}
    topics: list[NewTopic] = []
    keep: list[str] = []
    for t in meta.topics:
        if not t.name:
            continue
        if t.error_code or not t.partitions:
            keep.append(t.name)
            continue
        topic_id = getattr(t, "topic_id", None)
        topics.append(
            NewTopic(
                name=t.name,
                num_partitions=max(p.partition_index for p in t.partitions) + 1,
                topic_id=None if topic_id is None else topic_id_of(topic_id),
                partition_racks=replica_racks(t.partitions, rack_of),
            )
        )
    return topics, keep


def replica_racks(partitions: Sequence[Any], rack_of: dict[int, str]) -> PartitionRacks:
    """Each partition's replica racks: the racks of its replicas' brokers (brokers without a
    rack, or not listed, add none); partitions without any are left out."""
    if not rack_of:
        return {}
    return make_partition_racks(
        (
            int(p.partition_index),
            [rack_of[n] for n in map(int, p.replica_nodes) if n in rack_of],
        )
        for p in partitions
    )


def _log_changes(changes: SnapshotChanges) -> None:
    if changes.created or changes.updated or changes.deleted:
        log.info(
            "Topics from the upstream: created %s, partitions or racks changed %s, deleted %s.",
            [f"{t.name}({t.num_partitions})" for t in changes.created],
            [f"{t.name}({t.num_partitions})" for t in changes.updated],
            [t.name for t in changes.deleted],
        )
