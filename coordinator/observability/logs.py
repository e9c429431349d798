"""Log set-up (plain or JSON lines), structured fields, and the audit trail.

* ``--log-format plain`` (default): ``time LEVEL process logger: message``, what the
  coordinator always printed.
* ``--log-format json``: one JSON object a line (python-json-logger on orjson) with
  ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``process``
  (``coordinator`` or ``frontend-N``), ``message``, every structured field the line carries
  (``extra=``: ``group_id``, ``member_id``, ``cause`` ...), ``exc_info`` for tracebacks, and the
  ``trace_id``/``span_id`` of the current span when tracing is on.

Structured fields are passed as ``extra={...}`` and also appear in the plain message, so both
formats say the same. :func:`audit` writes the audit trail: one line on the ``kip848.audit``
logger (level INFO) for every administrative action, with its outcome, the client id and the
peer address.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from pythonjsonlogger.orjson import OrjsonFormatter

from . import tracing

LOG_FORMATS = ("plain", "json")
AUDIT_LOGGER = "kip848.audit"
audit_log = logging.getLogger(AUDIT_LOGGER)

_RESERVED = (
    "args",
    "asctime",
    "created",
    "exc_info",
    "exc_text",
    "filename",
    "funcName",
    "levelname",
    "levelno",
    "lineno",
    "module",
    "msecs",
    "message",
    "msg",
    "name",
    "pathname",
    "process",
    "processName",
    "relativeCreated",
    "stack_info",
    "thread",
    "threadName",
    "taskName",
)


class JsonLineFormatter(OrjsonFormatter):
    """One JSON object per record, on one line."""

    def __init__(self, process: str) -> None:
        super().__init__(reserved_attrs=_RESERVED, static_fields={"process": process})

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = (
            datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        ).replace("+00:00", "Z")
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        super().add_fields(log_data, record, message_dict)
        if tracing.STATE.enabled and "trace_id" not in log_data:
            ctx = tracing.current_span_context()
            if ctx is not None:
                log_data["trace_id"] = format(ctx.trace_id, "032x")
                log_data["span_id"] = format(ctx.span_id, "016x")


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, 0x85)}
_CONTROL.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029)})  # line and paragraph separators
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


class PlainFormatter(logging.Formatter):
    """The plain format, one line per record: control characters in the message (a group id,
    a client id or a config value a client sent with a newline in it) are written escaped
    (``\\n``, ``\\x1b`` ...), so no client can break a line or forge one; a traceback
    (``log.exception``) still follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if not message.isascii() or not message.isprintable():
            record.message = message.translate(_CONTROL)
        return super().formatMessage(record)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged (not when configured), so a
    replaced or closed stderr (tests capturing output, in-process runs) never breaks logging."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure_logging(
    level: str = "info",
    fmt: str = "plain",
    *,
    process: str = "coordinator",
    stream: TextIO | None = None,
) -> logging.Handler | None:
    """Route every ``kip848.*`` (and library) log line to ``stream`` (stderr) in ``fmt``.
    Replaces handlers a previous call installed; returns the handler. Without ``stream``,
    when the root logger already has other handlers, does nothing (returns None), like
    ``logging.basicConfig``."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler: logging.StreamHandler = (
        logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    )
    if fmt == "json":
        handler.setFormatter(JsonLineFormatter(process))
    else:
        tag = "" if process == "coordinator" else f"{process} "  # the format it always had
        handler.setFormatter(
            PlainFormatter(f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s")
        )
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_kip848", False)]
    if stream is None and len(ours) < len(root.handlers):
        # Someone else configured logging (an embedding program, a test harness): leave it, as
        # logging.basicConfig does.
        return None
    for old in ours:
        root.removeHandler(old)
    handler._kip848 = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    return handler


def fields_text(fields: Mapping[str, Any]) -> str:
    """``key=value`` pairs for the plain format (values with spaces quoted)."""
    out = []
    for key, value in fields.items():
        if value is None:
            continue
        text = (
            value
            if isinstance(value, str)
            else repr(value)
            if isinstance(value, float)
            else str(value)
        )
        if not text or any(c.isspace() for c in text) or '"' in text:
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(f"{key}={text}")
    return " ".join(out)


def audit(
    action: str,
    *,
    client_id: str,
    client_address: str,
    protocol: str,
    result: str,
    message: str | None = None,
    **details: Any,
) -> None:
    """One audit line: who (client id, peer address, protocol) did what (``action`` and its
    ``details``: topic, group, partitions, configs ...) and how it ended (``result``: an error
    name, NONE for success). Written after the action's outcome is known (durable or failed)."""
    if not audit_log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "audit": True,
        "action": action,
        "result": result,
        "client_id": client_id,
        "client_address": client_address,
        "protocol": protocol,
        **details,
    }
    if message:
        fields["error_message"] = message
    text = fields_text({k: v for k, v in fields.items() if k != "audit"})
    audit_log.info("Audit: %s", text, extra=fields)


def log_fields(logger: logging.Logger, level: int, message: str, /, **fields: Any) -> None:
    """``message`` followed by ``key=value`` pairs in the plain format; the same pairs as
    JSON keys in the JSON format."""
    if logger.isEnabledFor(level):
        logger.log(level, "%s %s", message, fields_text(fields), extra=fields)
