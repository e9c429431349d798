"""Store health, watched for the runtime: can the store be written, is it still the one on disk.

Rules and theory of operation:

* **Unwritable** (an append failed and the store knows nothing of it was written, e.g. the disk
  is full): the runtime keeps serving — each failed batch is answered COORDINATOR_NOT_AVAILABLE
  in-band and rolled back, reads and steady heartbeats are answered — but reports itself not
  serving (gRPC health NOT_SERVING). Every ``interval_s`` a *probe write*
  (``store.probe_write``) runs on the writer thread; the first write that succeeds, a probe or a
  batch, makes it writable (SERVING) again. No restart is needed once space is freed.
* **Lost** (``StoreLostError``: the store file, its log or its directory was deleted, replaced
  or unmounted under the open store): the runtime stops acknowledging for good (state FAILED,
  NOT_SERVING), logs it CRITICAL, and the store is *rescued* from the files still held open
  (``store.rescue``) so a restart does not come up empty. Noticed by the append after its
  commit, and by ``store.check_identity`` every ``interval_s`` even while nothing is written.
* Everything that touches the store runs on the runtime's single writer thread, so it is
  ordered with the appends; the watch itself is one task on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from .store import RecordStore, StoreError, StoreLostError, StoreWriteError

log = logging.getLogger("kip848.runtime")

WATCH_INTERVAL_S = 1.0
"""How often the store's identity is checked, and a probe write tried while unwritable."""


class StoreWatch:
    """Writable/lost status of one store, with its watch task. Owned by the runtime, which
    reports its appends (:meth:`write_failed`, :meth:`write_succeeded`) and is told of a lost
    store through ``on_lost`` and of any change through ``on_change``."""

    def __init__(
        self,
        store: RecordStore,
        *,
        on_change: Callable[[], None],
        on_lost: Callable[[StoreLostError], None],
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.store = store
        self.interval_s = interval_s
        self.writable = True
        self.write_error: str | None = None  # the failure that made the store unwritable
        self._on_change = on_change
        self._on_lost = on_lost
        self._task: asyncio.Task[None] | None = None
        self._executor: Executor | None = None
        self._lost_reported = False

    def start(self, executor: Executor) -> None:
        self._executor = executor
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="kip848-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # -- reports from the runtime (loop thread) ---------------------------------------------------

    def write_succeeded(self) -> None:
        if not self.writable:
            log.warning("The record store accepts writes again; serving normally.")
            self.writable = True
            self.write_error = None
            self._on_change()

    def write_failed(self, exc: BaseException) -> None:
        if isinstance(exc, StoreLostError):
            self.lost(exc)
            return
        if isinstance(exc, StoreWriteError) and exc.outcome_unknown:
            return  # the runtime stops serving; nothing to probe
        if self.writable:
            log.error(
                "The record store cannot be written (%s); answering writes "
                "COORDINATOR_NOT_AVAILABLE and probing every %.1f s until it can.",
                exc,
                self.interval_s,
            )
            self.writable = False
            self.write_error = str(exc)
            self._on_change()

    def lost(self, exc: StoreLostError) -> None:
        if not self._lost_reported:
            self._lost_reported = True
            self._on_lost(exc)

    # -- the watch task ---------------------------------------------------------------------------

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await loop.run_in_executor(self._executor, self.store.check_identity)
            except StoreLostError as exc:
                self.lost(exc)
                return
            except StoreError as exc:  # closed under us: the runtime is stopping
                log.debug("Store identity check skipped: %s", exc)
                continue
            if self.writable:
                continue
            try:
                await loop.run_in_executor(self._executor, self.store.probe_write)
            except StoreLostError as exc:
                self.lost(exc)
                return
            except StoreError as exc:
                log.debug("Write probe failed: %s", exc)
                continue
            self.write_succeeded()


async def rescue(store: RecordStore, executor: Executor) -> Any:
    """Save a lost store (``store.rescue`` on the writer thread) and log the outcome loudly;
    returns where it was saved, or None."""
    loop = asyncio.get_running_loop()
    try:
        where = await loop.run_in_executor(executor, store.rescue)
    except StoreError as exc:
        log.critical(
            "COULD NOT RESCUE THE RECORD STORE (%s). Acknowledged data exists only in this "
            "process now: do not restart it before restoring the data directory from a backup.",
            exc,
        )
        return None
    if ".rescued-" in str(where):
        advice = (
            "something else took the store's place: to use the rescued copy, move it into "
            "place as coordinator.db with the coordinator stopped"
        )
    else:
        advice = "a restart comes up with it"
    log.critical(
        "Rescued every acknowledged record of the lost store to %s (%s). The coordinator no "
        "longer serves: restart it.",
        where,
        advice,
    )
    return where
