"""What every RPC of the service layer shares: the ``@rpc`` wrapper, the error shapes, and the
hook through which the RPCs are observed.

``@rpc(error shape)`` is the one wrapper around an RPC body. It answers
COORDINATOR_NOT_AVAILABLE (or raises :class:`ShuttingDown`) while the runtime shuts down, turns
a protocol error (:class:`CoordinatorError`) into the RPC's own error shape and a bug into
UNKNOWN_SERVER_ERROR (logged with its traceback). The same wrapper runs whether the RPCs are
observed or not: an observed RPC is the wrapper built again with an :class:`RpcHook` (its
``begin`` before the body, its ``end`` with the answer after it), bound on the service instance
by :func:`observe`. This layer defines the hook; the observability package implements it
(metrics, spans, audit) without importing the server.

An :class:`RpcInfo` tells an observer what it needs about one RPC: its names on both
protocols, its gRPC service, whether it is administrative (audited), and how to read the
error code of its answer (:func:`answer_code`: the answers' shapes are this layer's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import types
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from coordinator.core.errors import CoordinatorError, ErrorCode, to_error_code
from coordinator.runtime import RuntimeState

from .api import Caller, Reply

log = logging.getLogger("kip848.server")

S = TypeVar("S")
Q = TypeVar("Q")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")

SHUTTING_DOWN = "The coordinator is shutting down."
CLOSED_STATES = (RuntimeState.CLOSING, RuntimeState.CLOSED)

ErrorShape = Callable[[Any, ErrorCode, str | None], Any]
"""How one RPC answers an error: ``shape(request, code, message)`` -> its answer."""


class ShuttingDown(Exception):
    """The runtime is closing; raised only for callers with ``abort_when_closing``."""


def closed_answer(on_error: ErrorShape, req: Any, caller: Caller) -> Any:
    """The answer of an RPC while the runtime shuts down: COORDINATOR_NOT_AVAILABLE in
    ``on_error``'s shape, or :class:`ShuttingDown` for a transport with its own answer."""
    if caller.abort_when_closing:
        raise ShuttingDown(SHUTTING_DOWN)
    return on_error(req, ErrorCode.COORDINATOR_NOT_AVAILABLE, SHUTTING_DOWN)


def failed_answer(on_error: ErrorShape, req: Any, exc: Exception, name: str) -> Any:
    """The answer of an RPC whose body raised ``exc`` (called while handling it): a protocol
    error in ``on_error``'s shape; anything else is a bug, logged with its traceback and
    answered with its code (UNKNOWN_SERVER_ERROR)."""
    if isinstance(exc, CoordinatorError):
        return on_error(req, exc.code, exc.message)
    log.exception("Unexpected error in %s", name)
    return on_error(req, *to_error_code(exc))


# ---------------------------------------------------------------- the observer hook


@dataclass(frozen=True, slots=True)
class RpcInfo:
    """One RPC of the service layer, as an observer sees it."""

    method: str
    """The service method (``offset_commit``)."""
    name: str
    """The RPC's name (``OffsetCommit``): the gRPC method, Kafka's API name."""
    kafka_name: str
    """The Kafka API served with it over the Kafka protocol (``Metadata`` for ``list_topics``);
    the RPC's name when no Kafka API is."""
    grpc_service: str = "grpc"
    """The gRPC service serving it (``kip848.v1.OffsetService``)."""
    audited: bool = False
    """Administrative: each resource it acts on gets an audit line (the ``audit`` flag of its
    row in the gRPC codec's tables)."""
    error_code: Callable[[Any], int] = dataclasses.field(
        default_factory=lambda: answer_code_reader()
    )
    """The error code of one of its answers (:func:`answer_code_reader`; its ``plain``
    attribute says which answers carry their code themselves, for an observer that reads it on
    every request without the call)."""


class RpcHook(Protocol):
    """What an observer runs around one RPC: ``begin`` as the wrapper starts (before the
    shutdown check), its value handed to ``end`` with the answer (None: the transport ends the
    call, as gRPC does while shutting down). Both run on every request of the RPC: cheap, and
    never raising."""

    def begin(self, req: Any, caller: Caller) -> Any: ...

    def end(self, began: Any, req: Any, caller: Caller, answer: Any) -> None: ...


class RpcObserver(Protocol):
    """Observes the RPCs of a service: a hook per RPC (None: that RPC is not observed)."""

    def hook(self, rpc: RpcInfo) -> RpcHook | None: ...

    def wants_trace_context(self) -> bool:
        """True while the callers' trace contexts are wanted (``Caller.trace_metadata``)."""
        ...


# ---------------------------------------------------------------- the wrapper


def _runner(
    name: str,
    body: Callable[[Any, Any, Caller], Awaitable[Any]],
    on_error: ErrorShape,
    hook: RpcHook | None,
) -> Callable[[Any, Any, Caller], Awaitable[Any]]:
    """The wrapper of one RPC body, observed by ``hook`` (None: not observed)."""
    begin = hook.begin if hook is not None else None
    end = hook.end if hook is not None else None

    async def run(self: Any, req: Any, caller: Caller) -> Any:
        began = begin(req, caller) if begin is not None else None
        answer = None
        try:
            if self.runtime.state in CLOSED_STATES:
                answer = closed_answer(on_error, req, caller)
            else:
                try:
                    answer = await body(self, req, caller)
                except Exception as exc:  # noqa: BLE001 (failed_answer logs a bug)
                    answer = failed_answer(on_error, req, exc, name)
        finally:
            if end is not None:
                end(began, req, caller, answer)
        return answer

    functools.update_wrapper(run, body)
    run.rpc_body = body  # type: ignore[attr-defined]
    run.rpc_on_error = on_error  # type: ignore[attr-defined]
    return run


def rpc(
    on_error: ErrorShape,
) -> Callable[[Callable[[S, Q, Caller], Awaitable[R]]], Callable[[S, Q, Caller], Awaitable[R]]]:
    """One RPC body, answering its errors in ``on_error``'s shape (the module's docstring)."""

    def wrap(
        body: Callable[[S, Q, Caller], Awaitable[R]],
    ) -> Callable[[S, Q, Caller], Awaitable[R]]:
        return cast(
            Callable[[S, Q, Caller], Awaitable[R]],
            _runner(body.__name__, cast(Any, body), on_error, None),
        )

    return wrap


def rpc_methods(service: Any) -> dict[str, Any]:
    """The ``@rpc`` methods of ``service``'s class, by name (the wrappers, unbound)."""
    return {
        name: fn
        for name, fn in vars(type(service)).items()
        if hasattr(fn, "rpc_body") and not name.startswith("_")
    }


def observe(service: Any, observer: RpcObserver, infos: dict[str, RpcInfo]) -> None:
    """Let ``observer`` observe the RPCs of one service instance (the class is untouched): each
    RPC it has a hook for runs the same wrapper, built with that hook. ``infos``: what is known
    of each RPC by its method name (missing: its names from the method's)."""
    service.observer = observer
    for name, fn in rpc_methods(service).items():
        info = infos.get(name)
        if info is None:
            rpc_name = "".join(part.capitalize() for part in name.split("_"))
            info = RpcInfo(method=name, name=rpc_name, kafka_name=rpc_name)
        hook = observer.hook(info)
        if hook is not None:
            run = _runner(name, fn.rpc_body, fn.rpc_on_error, hook)
            setattr(service, name, types.MethodType(run, service))


# ---------------------------------------------------------------- answers and their codes

_MAX_DEPTH = 6
_SEQUENCE_FIELDS: dict[type, tuple[str, ...]] = {}


def _sequence_fields(cls: type) -> tuple[str, ...]:
    """The fields of a response dataclass that hold entries (tuples, lists), cached."""
    names = _SEQUENCE_FIELDS.get(cls)
    if names is None:
        names = ()
        if dataclasses.is_dataclass(cls):
            names = tuple(
                f.name
                for f in dataclasses.fields(cls)
                if any(k in str(f.type) for k in ("tuple[", "list[", "Sequence["))
            )
        _SEQUENCE_FIELDS[cls] = names
    return names


def first_error(answer: Any, depth: int = 0) -> int:
    """The error code of an answer: its top-level code, else the first non-NONE code of its
    entries (depth-first, at most 6 levels), else 0."""
    code = getattr(answer, "error_code", None)
    if code:
        return int(code)
    if depth >= _MAX_DEPTH or answer is None:
        return 0
    if isinstance(answer, (list, tuple)):
        if len(answer) == 3 and isinstance(answer[1], ErrorCode):  # (group id, code, message)
            return int(answer[1])
        for item in answer:
            found = first_error(item, depth + 1)
            if found:
                return found
        return 0
    value = getattr(answer, "value", None)  # a Reply
    if value is not None:
        return first_error(value, depth + 1)
    for name in _sequence_fields(type(answer)):
        found = first_error(getattr(answer, name), depth + 1)
        if found:
            return found
    return 0


def plain_value(answer: Any) -> type | None:
    """The type of ``answer``'s value when the answer is a :class:`Reply` whose value holds no
    entries and no error code of its own (a heartbeat's response): the answer's code is then
    the Reply's own ``error_code``, as :func:`first_error` would find it. None otherwise."""
    if type(answer) is not Reply:
        return None
    value = answer.value
    if (
        value is None
        or isinstance(value, (list, tuple))
        or hasattr(value, "value")
        or hasattr(value, "error_code")
        or _sequence_fields(type(value))
    ):
        return None
    return type(value)


def answer_code_reader() -> Callable[[Any], int]:
    """The error code of one RPC's answers (:func:`first_error`), learning from its first
    answer whether they are plain (:func:`plain_value`): then each later answer's code is the
    Reply's own, read without the walk. An answer shape it cannot read is logged and counted
    UNKNOWN_SERVER_ERROR, never raised.

    The reader's ``plain`` attribute is ``[answer type, value type]`` of those plain answers,
    filled in place once learned (two types no answer has until then): an answer ``a`` with
    ``type(a) is plain[0] and type(a.value) is plain[1]`` has the code ``a.error_code``, for an
    observer that reads it on every request without calling the reader."""
    plain: type | None = None
    learned: list[type] = [_Unlearned, _Unlearned]

    def code(answer: Any) -> int:
        nonlocal plain
        if type(answer) is Reply and type(answer.value) is plain:
            return answer.error_code
        try:
            found = first_error(answer)
        except Exception:  # an answer shape we do not know: counted, never failed
            log.exception("Reading the error code of %r failed", type(answer).__name__)
            return int(ErrorCode.UNKNOWN_SERVER_ERROR)
        if plain is None:
            plain = plain_value(answer)
            if plain is not None:
                learned[:] = [Reply, plain]
        return found

    code.plain = learned  # type: ignore[attr-defined]
    return code


class _Unlearned:
    """The type of no answer: :func:`answer_code_reader`'s ``plain`` until it learned one."""


# ---------------------------------------------------------------- error shapes


def reply_error(_req: Any, code: ErrorCode, text: str | None) -> Reply[Any]:
    """The error shape of an RPC answering a :class:`Reply`: a top-level error."""
    return Reply(error_code=code, error_message=text)


def on_each(
    keys: Callable[[Any], Iterable[K]], error: Callable[[K, ErrorCode, str | None], Any]
) -> ErrorShape:
    """Error shape of an RPC that answers per group or per resource: ``error(key, code, text)``
    for every key of the request (Kafka has no top-level error there); also the top-level
    error, for a codec that has one."""

    def shape(req: Any, code: ErrorCode, text: str | None) -> Reply[Any]:
        return Reply(
            value=[error(k, code, text) for k in keys(req)], error_code=code, error_message=text
        )

    return shape


EACH_STEP = 256
"""Items :func:`each` answers a loop step: a request naming thousands of groups
(DescribeGroups, ConsumerGroupDescribe, DescribeConfigs: up to
``group.coordinator.request.max.groups``) lets the loop serve every other client between its
steps (10,000 groups in one step held it 0.4-1.1 s)."""


async def each(
    items: Iterable[K],
    answer: Callable[[K], Awaitable[V]],
    error: Callable[[K, ErrorCode, str | None], V],
) -> list[V]:
    """``answer(item)`` for each item, in order, :data:`EACH_STEP` items a loop step; a
    protocol error answers its item only."""
    out: list[V] = []
    for item in items:
        if out and not len(out) % EACH_STEP:
            await asyncio.sleep(0)  # the others' turn
        try:
            out.append(await answer(item))
        except CoordinatorError as exc:
            out.append(error(item, exc.code, exc.message))
    return out


async def batched(
    items: Iterable[K],
    check: Callable[[K], None],
    answer: Callable[[list[K]], Awaitable[Iterable[V]]],
    error: Callable[[K, ErrorCode, str | None], V],
) -> list[V]:
    """The items ``check`` passes, answered by one call of ``answer`` (one answer each, in
    order); an item ``check`` refuses is answered by its error, in its place."""
    answers: list[V | None] = []
    valid = []
    for item in items:
        try:
            check(item)
        except CoordinatorError as exc:
            answers.append(error(item, exc.code, exc.message))
            continue
        valid.append(item)
        answers.append(None)
    answered = iter(await answer(valid))
    return [a if a is not None else next(answered) for a in answers]
