"""The push stream (ConsumerGroupWatch): a member hears of its new target, or of a partition it
waits for being released, the moment the change is durable — not at its next heartbeat.

Theory of operation
-------------------
* One :class:`_GroupHub` per watched group (however many members watch it): it registers a
  watcher with the runtime (``runtime/watchers.py``), and each time a durable batch touched the
  group it reads the views of every watched member in one runtime read (which waits for the
  group's outstanding batch: nothing not yet durable is ever shown).
* Each stream keeps the latest view only (a slow reader skips intermediate views) and sends a
  message when the member has something new to do: its target changed, or a partition of its
  target that it does not have became free (released by its previous owner, or its owner was
  fenced), or the group epoch moved past the assignment epoch (the core computes a new target
  assignment in the next heartbeat of any member, as Kafka does: every watcher is told, so
  whichever heartbeats first computes it). The first message shows the member as it is. A member that is not (or no longer) in
  the group gets UNKNOWN_MEMBER_ID and the stream ends; so does every stream with the load or
  availability error of a read.
* The stream is authorized like a request, again before each message it sends
  (``authorized``: GROUP READ): once the caller may no longer read the group (an ACL removed
  while it watches), its next message is GROUP_AUTHORIZATION_FAILED and the stream ends, so a
  principal refused at its next heartbeat learns nothing more of the group here either.
* A message is only a hint: the member heartbeats and takes its assignment from the answer.
  Nothing here changes state, so the protocol is correct whatever the stream does.
* Shutdown: the runtime closes its watchers; every stream ends with ``ShuttingDown`` (gRPC
  UNAVAILABLE) or COORDINATOR_NOT_AVAILABLE in-band.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from coordinator.core.errors import CoordinatorError, ErrorCode, to_error_code
from coordinator.core.push import MemberView, push_due
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.watchers import GROUP_NOT_FOUND

from .api import Caller, WatchEvent, WatchRequest
from .authorization import group_denied

log = logging.getLogger("kip848.server")

SHUTTING_DOWN = "The coordinator is shutting down."


class ShuttingDownError(Exception):
    """Raised to a stream whose transport has its own "unavailable" (gRPC's UNAVAILABLE)."""


_CLOSED = object()


class _Latest:
    """A one-slot mailbox: ``put`` replaces, ``get`` waits for a value not yet taken."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._value: object = None

    def put(self, value: object) -> None:
        self._value = value
        self._event.set()

    async def get(self) -> object:
        await self._event.wait()
        self._event.clear()
        return self._value


class _GroupHub:
    def __init__(
        self, runtime: CoordinatorRuntime, group_id: str, on_idle: Callable[[_GroupHub], None]
    ) -> None:
        self.runtime = runtime
        self.group_id = group_id
        self.boxes: dict[str, set[_Latest]] = {}
        self._on_idle = on_idle
        self._task: asyncio.Task[None] | None = None
        self._poke = asyncio.Event()

    def subscribe(self, member_id: str) -> _Latest:
        box = _Latest()
        self.boxes.setdefault(member_id, set()).add(box)
        if self._task is None or self._task.done():  # a hub whose read failed starts over
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"kip848-push-{self.group_id}"
            )
        self._poke.set()  # a new stream's first message
        return box

    def unsubscribe(self, member_id: str, box: _Latest) -> None:
        boxes = self.boxes.get(member_id)
        if boxes is not None:
            boxes.discard(box)
            if not boxes:
                del self.boxes[member_id]
        if not self.boxes and self._task is not None:
            self._task.cancel()
            self._task = None
            self._on_idle(self)

    def _broadcast(self, value: object) -> None:
        for boxes in self.boxes.values():
            for box in boxes:
                box.put(value)

    async def _run(self) -> None:
        with self.runtime.watchers.watch(self.group_id) as watch:
            changed = asyncio.ensure_future(watch.changed())
            poked = asyncio.ensure_future(self._poke.wait())
            try:
                while self.boxes:
                    self._poke.clear()
                    if watch.closed:
                        self._broadcast(_CLOSED)
                        return
                    try:
                        views = await self.runtime.member_views(self.group_id, list(self.boxes))
                    except CoordinatorError as exc:
                        self._broadcast(exc)
                        return
                    except Exception as exc:
                        log.exception("push: reading group %s failed", self.group_id)
                        self._broadcast(exc)
                        return
                    for member_id, boxes in self.boxes.items():
                        if isinstance(views, str):
                            value: object = views
                        elif member_id in views:
                            value = views[member_id]
                        else:
                            continue  # subscribed during the read: its poke brings the next one
                        for box in boxes:
                            box.put(value)
                    await asyncio.wait((changed, poked), return_when=asyncio.FIRST_COMPLETED)
                    if changed.done():
                        changed = asyncio.ensure_future(watch.changed())
                    if poked.done():
                        poked = asyncio.ensure_future(self._poke.wait())
            finally:
                changed.cancel()
                poked.cancel()


def _event_of(view: object, last: MemberView | None) -> WatchEvent | None:
    """The message a view calls for (None: nothing new for the member; ``core/push.py``)."""
    if view == GROUP_NOT_FOUND:
        return WatchEvent(
            error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message="The group does not exist."
        )
    if view is None:
        return WatchEvent(
            error_code=ErrorCode.UNKNOWN_MEMBER_ID,
            error_message="The member is not in the group.",
        )
    assert isinstance(view, MemberView)
    if not push_due(view, last):
        return None
    return WatchEvent(
        member_epoch=view.member_epoch,
        group_epoch=view.group_epoch,
        assignment_epoch=view.assignment_epoch,
        target=view.target,
        released=view.released,
    )


class MemberPush:
    """The push streams of one coordinator."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime
        self._hubs: dict[str, _GroupHub] = {}

    def _idle(self, hub: _GroupHub) -> None:
        if self._hubs.get(hub.group_id) is hub:
            del self._hubs[hub.group_id]

    async def watch(
        self, req: WatchRequest, caller: Caller, authorized: Callable[[], bool] = lambda: True
    ) -> AsyncIterator[WatchEvent]:
        """The stream of ``req``'s member; ``authorized()`` (GROUP READ, reporting a refusal)
        is asked first and before each message (see the module doc)."""
        if not authorized():
            yield _refused(req)
            return
        if self.runtime.state in (RuntimeState.CLOSING, RuntimeState.CLOSED):
            if caller.abort_when_closing:
                raise ShuttingDownError(SHUTTING_DOWN)
            yield WatchEvent(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=SHUTTING_DOWN
            )
            return
        if not req.group_id.strip():
            yield WatchEvent(
                error_code=ErrorCode.INVALID_GROUP_ID, error_message="Group id can't be empty."
            )
            return
        if not req.member_id.strip():
            yield WatchEvent(
                error_code=ErrorCode.INVALID_REQUEST, error_message="MemberId can't be empty."
            )
            return
        hub = self._hubs.get(req.group_id)
        if hub is None:
            hub = self._hubs[req.group_id] = _GroupHub(self.runtime, req.group_id, self._idle)
        box = hub.subscribe(req.member_id)
        last: MemberView | None = None
        try:
            while True:
                value = await box.get()
                if value is _CLOSED:
                    if caller.abort_when_closing:
                        raise ShuttingDownError(SHUTTING_DOWN)
                    yield WatchEvent(
                        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=SHUTTING_DOWN
                    )
                    return
                if isinstance(value, Exception):
                    code, message = to_error_code(value)
                    event: WatchEvent | None = WatchEvent(error_code=code, error_message=message)
                else:
                    event = _event_of(value, last)
                if event is None:
                    continue
                if not authorized():  # an ACL changed while the stream was open
                    yield _refused(req)
                    return
                yield event
                if event.error_code != ErrorCode.NONE:
                    return
                assert isinstance(value, MemberView)
                last = value
        finally:
            hub.unsubscribe(req.member_id, box)


def _refused(req: WatchRequest) -> WatchEvent:
    exc = group_denied(req.group_id)
    return WatchEvent(error_code=exc.code, error_message=exc.message)


__all__ = ["MemberPush", "ShuttingDownError"]
