"""The topic registry's images built from the previous one and the topics changed
(coordinator/core/topics.py ``image_changed``): always equal to the image built whole from
every topic, whatever the sequence of creations, partition increases, deletions, broker
snapshots, rollbacks and durable catch-ups; earlier images never change; a change keeps the
images of the topics it did not touch; the mappings made from the last ones
(``model.mapping_changed``) equal dicts changed in place."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.errors import CoordinatorError
from coordinator.core.model import (
    REMOVED,
    LayeredMap,
    TopicImage,
    TopicsImage,
    mapping_changed,
)
from coordinator.core.topics import NewTopic, TopicRegistry

NAMES = ["a", "b", "c", "d", "e"]
IDS = [None, None, "vUoHcKbRQRu-E0ATTUX9fA", "T0pic1dTopic1dTopic1dA"]
RACKS = [{}, {0: frozenset({"r1"})}, {0: frozenset({"r1", "r2"}), 1: frozenset({"r2"})}]

new_topic = st.builds(
    lambda name, count, topic_id, racks: NewTopic(
        name=name,
        num_partitions=count,
        topic_id=topic_id,
        partition_racks={p: rs for p, rs in racks.items() if p < count},
    ),
    st.sampled_from(NAMES),
    st.integers(1, 3),
    st.sampled_from(IDS),
    st.sampled_from(RACKS),
)
op = st.one_of(
    st.tuples(st.just("create"), st.lists(new_topic, max_size=3)),
    st.tuples(
        st.just("grow"), st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 5)), max_size=2)
    ),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(NAMES), max_size=3)),
    st.tuples(
        st.just("snapshot"),
        st.lists(new_topic, max_size=4),
        st.lists(st.sampled_from(NAMES), max_size=1),
    ),
    st.tuples(st.just("mark")),
    st.tuples(st.just("rollback")),
    st.tuples(st.just("release")),
    st.tuples(st.just("follow")),
)


def whole(topics: dict[str, Any]) -> TopicsImage:
    return TopicsImage.of(
        TopicImage(v.topic_id, n, v.num_partitions, v.partition_racks) for n, v in topics.items()
    )


def check(registry: TopicRegistry) -> TopicsImage:
    """The registry's image equals the image of its topics built whole."""
    image = registry.image()
    expected = whole(registry.topics)
    assert image.by_name == expected.by_name
    assert image.by_id == expected.by_id
    return image


def follow(follower: TopicRegistry, leader: TopicRegistry) -> None:
    """What a node's committed copy does catching up: durable records only (its undo log
    off), a batch at once: the tombstones of the topics the leader no longer has, then the
    topics that are new or differ (``loader.cluster_changes``)."""
    batch = [r.topic_record(n, None) for n in follower.topics if n not in leader.topics]
    batch += [
        r.Record(r.TopicKey(n), v) for n, v in leader.topics.items() if follower.topics.get(n) != v
    ]
    for record in batch:
        follower.replay(record)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
def test_an_image_built_from_the_last_one_equals_the_image_built_whole(ops: list[Any]) -> None:
    registry = TopicRegistry(SequentialIds())
    follower = TopicRegistry(SequentialIds())
    follower.undo.enabled = False
    marks: list[int] = []
    taken: list[tuple[TopicsImage, dict[str, TopicImage], dict[str, TopicImage]]] = []
    last = check(registry)
    for step in ops:
        kind = step[0]
        changed = False
        try:
            if kind == "create":
                changed = bool(registry.create_topics(step[1]).records)
            elif kind == "grow":
                changed = bool(registry.create_partitions(step[1]).records)
            elif kind == "delete":
                changed = bool(registry.delete_topics(step[1]).records)
            elif kind == "snapshot":
                changed = bool(registry.apply_snapshot(step[1], keep=step[2]).records)
        except CoordinatorError:
            pass  # a snapshot refused whole changed nothing
        if kind == "mark":
            marks.append(registry.mark())
        elif kind == "rollback" and marks:
            registry.rollback(marks.pop())
            changed = True
        elif kind == "release" and marks:
            registry.release(marks.pop(0))
        elif kind == "follow":
            before = follower.image()
            follow(follower, registry)
            image = check(follower)
            assert image.by_name == registry.image().by_name
            for name, t in image.by_name.items():  # what the batch did not change
                if before.by_name.get(name) == t:
                    assert before.by_name[name] is t
        image = check(registry)
        # A new version after every change (a rollback too), the same image otherwise.
        if changed:
            assert image.version > last.version
        else:
            assert image is last
        # What no change touched keeps its image.
        for name, t in image.by_name.items():
            old = last.by_name.get(name)
            if old is not None and old == t:
                assert old is t
        taken.append((image, dict(image.by_name), dict(image.by_id)))
        last = image
    # Images are immutable: none changed after it was taken.
    for image, by_name, by_id in taken:
        assert image.by_name == by_name and image.by_id == by_id


def test_one_topic_created_keeps_every_other_topics_image() -> None:
    """The image after a change shares the images of the topics it did not change (built
    from the last one); before, every topic's image was built again."""
    registry = TopicRegistry(SequentialIds())
    registry.create_topics([NewTopic(name=f"t{i}", num_partitions=2) for i in range(100)])
    before = registry.image()
    registry.create_topics([NewTopic(name="new", num_partitions=1)])
    registry.create_partitions([("t7", 3)])
    registry.delete_topics(["t8"])
    after = registry.image()
    assert after.version == before.version + 1
    unchanged = [f"t{i}" for i in range(100) if i not in (7, 8)]
    assert all(after.by_name[n] is before.by_name[n] for n in unchanged)
    assert all(after.by_id[before.by_name[n].topic_id] is before.by_name[n] for n in unchanged)
    assert after.by_name["t7"].num_partitions == 3 and before.by_name["t7"].num_partitions == 2
    assert "t8" not in after.by_name and before.by_name["t8"].topic_id not in after.by_id
    assert after.by_name["new"].num_partitions == 1 and "new" not in before.by_name


def test_a_rollback_gives_back_the_topics_it_undid() -> None:
    """A rollback past an image that held the changes it undoes: the next image is the one
    before them again (the names it undid come from the undo log), a new version."""
    registry = TopicRegistry(SequentialIds())
    registry.create_topics([NewTopic(name="a", num_partitions=1)])
    first = registry.image()
    mark = registry.mark()
    registry.create_topics([NewTopic(name="b", num_partitions=1)])
    registry.create_partitions([("a", 4)])
    registry.delete_topics(["a"])
    registry.create_topics([NewTopic(name="a", num_partitions=2)])
    assert sorted(registry.image().by_name) == ["a", "b"]
    registry.rollback(mark)
    image = registry.image()
    assert image.version > first.version
    assert image.by_name == first.by_name and image.by_id == first.by_id
    # Nothing changed since: the same dicts are shared, not copied.
    mark = registry.mark()
    registry.rollback(mark)
    again = registry.image()
    assert again.version == image.version + 1
    assert again.by_name is image.by_name and again.by_id is image.by_id


def test_an_id_freed_in_a_batch_is_given_to_another_topic() -> None:
    """A batch that deletes a topic and gives its id to a new one (replayed records: a
    node's catch-up): the id maps to the new topic."""
    registry = TopicRegistry(SequentialIds())
    registry.replay(r.topic_record("old", "vUoHcKbRQRu-E0ATTUX9fA", 1))
    registry.image()
    registry.replay(r.topic_record("new", "vUoHcKbRQRu-E0ATTUX9fA", 2))
    registry.replay(r.topic_record("old", None))
    image = registry.image()
    assert image.by_id == {"vUoHcKbRQRu-E0ATTUX9fA": TopicImage("vUoHcKbRQRu-E0ATTUX9fA", "new", 2)}
    assert list(image.by_name) == ["new"]
    # The registry's own check of a new id: the id is in use, by "new".
    out = registry.create_topics(
        [NewTopic(name="x", num_partitions=1, topic_id="vUoHcKbRQRu-E0ATTUX9fA")]
    )
    assert out.response is not None and out.response[0].error_code != 0


change = st.dictionaries(
    st.integers(0, 299), st.one_of(st.just(REMOVED), st.integers(0, 3)), max_size=40
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.integers(0, 299), st.integers(0, 3)), st.lists(change, max_size=30))
def test_a_mapping_changed_equals_the_dict_changed(
    first: dict[int, int], changes: list[dict[int, Any]]
) -> None:
    """``mapping_changed`` (what an image's mappings are made with): after any sequence of
    changes, the mapping equals a dict changed in place — lookups, membership, length,
    iteration, equality, a pickle's copy — whether it is a layered map or a plain dict again
    (past 64 + the square root of its base's size); none before it changes."""
    mapping: Any = dict(first)
    model = dict(first)
    kept: list[tuple[Any, dict[int, int]]] = [(mapping, dict(model))]
    for c in changes:
        mapping = mapping_changed(mapping, c)
        for key, value in c.items():
            if value is REMOVED:
                model.pop(key, None)
            else:
                model[key] = value
        assert isinstance(mapping, (dict, LayeredMap))
        if isinstance(mapping, LayeredMap):
            assert len(mapping._over) <= 64 + math.isqrt(len(mapping._base))
        assert len(mapping) == len(model)
        assert sorted(mapping) == sorted(model)
        assert dict(mapping.items()) == model and mapping == model and model == mapping
        for key in range(300):
            assert (key in mapping) == (key in model)
            assert mapping.get(key) == model.get(key)
            assert mapping.get(key, "none") == model.get(key, "none")
            if key in model:
                assert mapping[key] == model[key]
            else:
                with pytest.raises(KeyError):
                    mapping[key]
        assert pickle.loads(pickle.dumps(mapping)) == model
        kept.append((mapping, dict(model)))
    for earlier, as_it_was in kept:
        assert dict(earlier.items()) == as_it_was and len(earlier) == len(as_it_was)


def test_a_large_registry_changed_one_topic_at_a_time() -> None:
    """1,000 topics, then 400 creations and 400 deletions one at a time: each image equals
    the one built whole; the mappings are layered over the last plain dicts and made plain
    again now and then (at most 64 + 31 topics over a base of 1,000)."""
    registry = TopicRegistry(SequentialIds())
    registry.create_topics([NewTopic(name=f"t{i}", num_partitions=1) for i in range(1000)])
    assert type(check(registry).by_name) is dict
    kinds: set[type] = set()
    for i in range(400):
        registry.create_topics([NewTopic(name=f"n{i}", num_partitions=2)])
        registry.delete_topics([f"t{i}"])
        image = check(registry)
        kinds.add(type(image.by_name))
        if isinstance(image.by_name, LayeredMap):
            assert len(image.by_name._over) <= 64 + math.isqrt(len(image.by_name._base))
    assert kinds == {dict, LayeredMap}
