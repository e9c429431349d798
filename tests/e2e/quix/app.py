"""A quixstreams application with ``processing_guarantee="exactly-once"``, in the virtualenv of
its own that scripts/bootstrap makes (.venv-quix, tests/e2e/quix/requirements.txt), for
tests/e2e/test_kafka_quixstreams.py:

    .venv-quix/bin/python tests/e2e/quix/app.py BOOTSTRAP GROUP STATE_DIR IDLE_S

It maps every record of ``q-in`` to ``out-<value>`` on ``q-out`` (a little slowly, so that a
kill lands in the middle of the run) and stops after ``IDLE_S`` without input. Quix's defaults
otherwise: the classic consumer protocol, the offsets committed with the output in one
transaction (send_offsets_to_transaction) every half second here.
"""

from __future__ import annotations

import sys
import time

from quixstreams import Application


def transform(value: bytes) -> bytes:
    time.sleep(0.05)
    return b"out-" + value


def main(bootstrap: str, group: str, state_dir: str, idle_s: float) -> None:
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        use_changelog_topics=False,
        state_dir=state_dir,
        commit_interval=0.5,
        # A killed application's member leaves the group after 6 s, not 45.
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    )
    topic_in = app.topic("q-in", value_deserializer="bytes", value_serializer="bytes")
    topic_out = app.topic("q-out", value_deserializer="bytes", value_serializer="bytes")
    sdf = app.dataframe(topic_in).apply(transform)
    sdf.to_topic(topic_out)
    app.run(timeout=idle_s)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
