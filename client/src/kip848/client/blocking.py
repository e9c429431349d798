"""A thin blocking wrapper over :class:`kip848.client.aio.GroupMember`.

The asyncio member runs on its own event loop in a daemon thread (the heartbeat thread);
callbacks run one at a time on a second thread (the callback thread), so a slow callback never
delays a heartbeat. Every method may be called from any thread, callbacks included (a callback
may commit). Methods take ``timeout`` in seconds and raise ``TimeoutError`` when it passes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from .aio import GroupMember
from .member import MemberState
from .types import MemberFailedError, TopicPartition

T = TypeVar("T")
SyncCallback = Callable[[frozenset[TopicPartition]], None]


class BlockingGroupMember:
    """:class:`GroupMember` for threaded programs: same arguments, plain-function callbacks.

    ``with BlockingGroupMember(...) as member:`` starts it and closes it (leaving the group)."""

    def __init__(
        self,
        target: str,
        group_id: str,
        *,
        on_assigned: SyncCallback | None = None,
        on_revoked: SyncCallback | None = None,
        on_lost: SyncCallback | None = None,
        **options: Any,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"kip848-heartbeat-{group_id}", daemon=True
        )
        self._callback_prefix = f"kip848-callback-{id(self)}"
        self._callbacks = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=self._callback_prefix
        )
        try:
            self._member = GroupMember(
                target,
                group_id,
                on_assigned=self._wrap(on_assigned),
                on_revoked=self._wrap(on_revoked),
                on_lost=self._wrap(on_lost),
                **options,
            )
        except BaseException:  # its arguments refused: nothing of this one stays open
            self._callbacks.shutdown(wait=False)
            self._loop.close()
            raise
        self._closed = False
        self._stopped = False  # close() stopped the event loop
        self._thread.start()

    def _wrap(self, fn: SyncCallback | None) -> Callable[[frozenset[TopicPartition]], Any] | None:
        if fn is None:
            return None

        async def run(partitions: frozenset[TopicPartition]) -> None:
            await self._loop.run_in_executor(self._callbacks, fn, partitions)

        return run

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking call from the member's own event loop")
        if self._stopped:
            coro.close()
            raise RuntimeError("the member is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

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
        return self._member.assignment

    @property
    def pending(self) -> frozenset[TopicPartition]:
        return self._member.pending

    @property
    def failure(self) -> MemberFailedError | None:
        return self._member.failure

    @property
    def aio(self) -> GroupMember:
        """The asyncio member underneath (its loop runs in another thread)."""
        return self._member

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> BlockingGroupMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._run(self._member.start(), None)

    def close(self, *, leave_group: bool | None = None, timeout: float = 30.0) -> None:
        """Leave the group (see :meth:`GroupMember.close`), then stop both threads."""
        if self._closed:
            return
        if threading.current_thread().name.startswith(self._callback_prefix):
            raise RuntimeError(
                "close() from a rebalance callback would wait for that callback to return; "
                "close the member from another thread"
            )
        self._closed = True
        try:
            self._run(self._member.close(leave_group=leave_group, timeout=timeout), timeout + 5)
        finally:
            self._stopped = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._callbacks.shutdown(wait=False)
            if not self._thread.is_alive():
                self._loop.close()

    def wait_joined(self, timeout: float | None = None) -> None:
        self._run(self._member.wait_joined(), timeout)

    def wait_stable(self, timeout: float | None = None) -> None:
        self._run(self._member.wait_stable(), timeout)

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        self._run(self._member.wait_until(predicate), timeout)

    def update_subscription(
        self, topics: Iterable[str] | None = None, pattern: str | None = None
    ) -> None:
        self._run(self._member.update_subscription(topics, pattern), None)

    # ------------------------------------------------------------------ offsets

    def store_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._loop.call_soon_threadsafe(self._member.store_offsets, dict(offsets))

    def commit(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        metadata: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self._run(self._member.commit(offsets, metadata=metadata, timeout=timeout), timeout + 5)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        metadata: str | None = None,
        timeout: float = 60.0,
    ) -> concurrent.futures.Future[None]:
        """A future with the commit's outcome (``.result()`` raises CommitFailedError)."""
        coro = self._member.commit(offsets, metadata=metadata, timeout=timeout)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def committed(
        self, partitions: Iterable[TopicPartition], *, timeout: float = 60.0
    ) -> dict[TopicPartition, int]:
        return self._run(self._member.committed(list(partitions), timeout=timeout), timeout + 5)
