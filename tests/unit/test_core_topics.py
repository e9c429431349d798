"""The topic registry (coordinator/core/topics.py): Kafka's CreateTopics / CreatePartitions /
DeleteTopics rules with per-topic error codes, and versioned immutable topic images."""

from __future__ import annotations

import pytest

from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.errors import ErrorCode, IllegalStateError, InvalidTopicError
from coordinator.core.model import ZERO_TOPIC_ID, TopicImage, TopicsImage
from coordinator.core.topics import (
    MAX_PARTITIONS,
    NewTopic,
    TopicRegistry,
    TopicResult,
    check_topic_name,
)

ID1 = "AAAAAAAAAAAAAAAAAAAAAQ"  # SequentialIds' first topic id
ID2 = "AAAAAAAAAAAAAAAAAAAAAg"
ID3 = "AAAAAAAAAAAAAAAAAAAAAw"
EXPLICIT = "vUoHcKbRQRu-E0ATTUX9fA"


def registry() -> TopicRegistry:
    return TopicRegistry(SequentialIds())


def create(reg: TopicRegistry, *topics: tuple[str, int] | NewTopic) -> list[TopicResult]:
    items = [
        t if isinstance(t, NewTopic) else NewTopic(name=t[0], num_partitions=t[1]) for t in topics
    ]
    return reg.create_topics(items).response  # type: ignore[return-value]


def error(name: str, code: ErrorCode, message: str) -> TopicResult:
    return TopicResult(name=name, error_code=code, error_message=message)


# ------------------------------------------------------------------------ create


def test_create_topics_emits_records_and_answers_per_topic() -> None:
    reg = registry()
    res = reg.create_topics(
        [NewTopic(name="foo", num_partitions=3), NewTopic(name="bar", num_partitions=1)]
    )
    assert res.response == [
        TopicResult(name="foo", topic_id=ID1, num_partitions=3),
        TopicResult(name="bar", topic_id=ID2, num_partitions=1),
    ]
    assert res.records == [r.topic_record("foo", ID1, 3), r.topic_record("bar", ID2, 1)]
    assert reg.list_topics() == [
        TopicResult(name="bar", topic_id=ID2, num_partitions=1),
        TopicResult(name="foo", topic_id=ID1, num_partitions=3),
    ]


LONGEST = "x" * 249


@pytest.mark.parametrize(
    "name,message",
    [
        ("", "Topic name is illegal, it can't be empty."),
        (".", 'Topic name cannot be "." or "..".'),
        ("..", 'Topic name cannot be "." or "..".'),
        (
            "x" * 250,
            f"Topic name is illegal, it can't be longer than 249 characters, topic name: {'x' * 250}",
        ),
        (
            "a b",
            "Topic name \"a b\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "a/b",
            "Topic name \"a/b\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "caf\u00e9",
            "Topic name \"caf\u00e9\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "t\n",
            "Topic name \"t\n\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "a+b",
            "Topic name \"a+b\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
    ids=["empty", "dot", "dotdot", "too_long", "space", "slash", "non_ascii", "newline", "plus"],
)
def test_invalid_topic_names(name: str, message: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        check_topic_name(name)
    assert info.value.message == message
    reg = registry()
    assert create(reg, (name, 1)) == [error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, message)]
    assert reg.topics == {}


@pytest.mark.parametrize(
    "name", [LONGEST, "a.b_c-D9", "...", "_", "-", "__consumer_offsets", "A" * 10]
)
def test_valid_topic_names(name: str) -> None:
    check_topic_name(name)
    reg = registry()
    assert create(reg, (name, 1)) == [TopicResult(name=name, topic_id=ID1, num_partitions=1)]


def test_topic_already_exists() -> None:
    reg = registry()
    create(reg, ("foo", 3))
    res = reg.create_topics([NewTopic(name="foo", num_partitions=5)])
    assert res.response == [
        error("foo", ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'foo' already exists.")
    ]
    assert res.records == []
    assert reg.topics["foo"] == r.TopicValue(topic_id=ID1, num_partitions=3)


def test_duplicate_names_in_one_request_create_nothing() -> None:
    """Kafka (CreateTopics): a name listed twice is answered INVALID_REQUEST and that topic is
    not created; the other topics of the request are processed normally."""
    reg = registry()
    res = reg.create_topics(
        [
            NewTopic(name="foo", num_partitions=1),
            NewTopic(name="bar", num_partitions=2),
            NewTopic(name="foo", num_partitions=3),
        ]
    )
    assert "foo" not in reg.topics
    assert_duplicate_refused(res.response, "foo")  # type: ignore[arg-type]
    assert [t for t in res.response if t.name == "bar"] == [  # type: ignore[union-attr]
        TopicResult(name="bar", topic_id=reg.topics["bar"].topic_id, num_partitions=2)
    ]
    assert [rec.key.name for rec in res.records] == ["bar"]  # type: ignore[union-attr]


@pytest.mark.parametrize("count", [0, -5, MAX_PARTITIONS + 1])
def test_invalid_partition_counts(count: int) -> None:
    reg = registry()
    assert create(reg, ("foo", count)) == [
        error(
            "foo",
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions must be between 1 and {MAX_PARTITIONS}"
            f" (or -1 for the default), got {count}."
            if count > 0
            else "Number of partitions was set to an invalid non-positive value.",  # Kafka's
        )
    ]
    assert reg.topics == {}


def test_minus_one_partitions_means_the_default() -> None:
    # Kafka's CreateTopics: -1 takes the broker's num.partitions.
    reg = TopicRegistry(SequentialIds(), default_num_partitions=6)
    assert create(reg, ("foo", -1)) == [TopicResult(name="foo", topic_id=ID1, num_partitions=6)]
    assert reg.topics["foo"] == r.TopicValue(topic_id=ID1, num_partitions=6)
    assert create(registry(), ("bar", -1)) == [
        TopicResult(name="bar", topic_id=ID1, num_partitions=1)
    ]


def test_partition_count_bounds_are_inclusive() -> None:
    reg = registry()
    assert create(reg, ("one", 1), ("many", MAX_PARTITIONS)) == [
        TopicResult(name="one", topic_id=ID1, num_partitions=1),
        TopicResult(name="many", topic_id=ID2, num_partitions=MAX_PARTITIONS),
    ]


def test_explicit_topic_ids() -> None:
    reg = registry()
    assert create(reg, NewTopic(name="foo", num_partitions=2, topic_id=EXPLICIT)) == [
        TopicResult(name="foo", topic_id=EXPLICIT, num_partitions=2)
    ]
    # Already in use, the zero id, and an id used twice in one request are refused.
    assert create(reg, NewTopic(name="bar", num_partitions=1, topic_id=EXPLICIT)) == [
        error(
            "bar", ErrorCode.INVALID_REQUEST, f"Topic id {EXPLICIT} is reserved or already in use."
        )
    ]
    assert create(reg, NewTopic(name="bar", num_partitions=1, topic_id=ZERO_TOPIC_ID)) == [
        error(
            "bar",
            ErrorCode.INVALID_REQUEST,
            f"Topic id {ZERO_TOPIC_ID} is reserved or already in use.",
        )
    ]
    assert create(
        reg,
        NewTopic(name="a", num_partitions=1, topic_id=ID3),
        NewTopic(name="b", num_partitions=1, topic_id=ID3),
    ) == [
        TopicResult(name="a", topic_id=ID3, num_partitions=1),
        error("b", ErrorCode.INVALID_REQUEST, f"Topic id {ID3} is reserved or already in use."),
    ]
    assert sorted(reg.topics) == ["a", "foo"]


def test_a_generated_id_never_duplicates_an_id_in_use() -> None:
    """The id generator may produce an id that an explicit id already took: it must never be
    given to a second topic."""
    reg = registry()
    create(reg, NewTopic(name="foo", num_partitions=1, topic_id=ID1))
    for name in ("bar", "baz"):
        (res,) = create(reg, (name, 1))
        assert res.topic_id != ID1
    ids = [v.topic_id for v in reg.topics.values()]
    assert len(ids) == len(set(ids))
    assert reg.topics["foo"].topic_id == ID1


def test_one_bad_topic_does_not_fail_the_others() -> None:
    reg = registry()
    create(reg, ("exists", 1))
    assert create(reg, ("ok", 2), ("", 1), ("exists", 1), ("zero", 0), ("ok2", 1)) == [
        TopicResult(name="ok", topic_id=ID2, num_partitions=2),
        error("", ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty."),
        error("exists", ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'exists' already exists."),
        error(
            "zero",
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        TopicResult(name="ok2", topic_id=ID3, num_partitions=1),
    ]


# ------------------------------------------------------------------------ add partitions


def test_add_partitions() -> None:
    reg = registry()
    create(reg, ("foo", 3))
    res = reg.create_partitions([("foo", 5)])
    assert res.response == [TopicResult(name="foo", topic_id=ID1, num_partitions=5)]
    assert res.records == [r.topic_record("foo", ID1, 5)]
    assert reg.image().by_name["foo"] == TopicImage(ID1, "foo", 5)


def test_replica_racks_are_registered_normalised_and_listed() -> None:
    reg = registry()
    racks = {0: frozenset({"a", "b"}), 2: frozenset({"b", "a"}), 1: frozenset()}
    res = reg.create_topics([NewTopic(name="foo", num_partitions=3, partition_racks=racks)])
    normal = {0: frozenset({"a", "b"}), 2: frozenset({"a", "b"})}  # no racks: left out
    assert res.response == [
        TopicResult(name="foo", topic_id=ID1, num_partitions=3, partition_racks=normal)
    ]
    assert res.records == [r.topic_record("foo", ID1, 3, normal)]
    assert reg.image().by_name["foo"] == TopicImage(ID1, "foo", 3, normal)
    assert reg.list_topics()[0].partition_racks == normal
    # Partitions added later have no racks; the others keep theirs.
    assert reg.create_partitions([("foo", 5)]).records == [r.topic_record("foo", ID1, 5, normal)]


@pytest.mark.parametrize(
    "racks,message",
    [
        (
            {3: frozenset({"a"})},
            "Replica racks are given for partition 3 of topic foo, which has 3 partitions.",
        ),
        (
            {-1: frozenset({"a"})},
            "Replica racks are given for partition -1 of topic foo, which has 3 partitions.",
        ),
        ({1: frozenset({"a", " "})}, "A replica rack of partition 1 of topic foo is blank."),
    ],
    ids=["beyond", "negative", "blank"],
)
def test_invalid_replica_racks(racks: dict[int, frozenset[str]], message: str) -> None:
    reg = registry()
    out = create(reg, NewTopic(name="foo", num_partitions=3, partition_racks=racks), ("bar", 1))
    assert out == [
        error("foo", ErrorCode.INVALID_REQUEST, message),
        TopicResult(name="bar", topic_id=ID1, num_partitions=1),
    ]


@pytest.mark.parametrize(
    "name,count,code,message",
    [
        ("nope", 4, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
        (
            "foo",
            3,
            ErrorCode.INVALID_PARTITIONS,
            "Topic already has 3 partition(s).",
        ),
        (
            "foo",
            2,
            ErrorCode.INVALID_PARTITIONS,
            "The topic foo currently has 3 partition(s); 2 would not be an increase.",
        ),
        (
            "foo",
            MAX_PARTITIONS + 1,
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions must be at most {MAX_PARTITIONS}.",
        ),
    ],
    ids=["unknown_topic", "same_count", "decrease", "too_many"],
)
def test_add_partitions_errors(name: str, count: int, code: ErrorCode, message: str) -> None:
    reg = registry()
    create(reg, ("foo", 3))
    image = reg.image()
    res = reg.create_partitions([(name, count)])
    assert res.response == [error(name, code, message)]
    assert res.records == []
    assert reg.topics["foo"].num_partitions == 3
    assert reg.image() is image


def test_add_partitions_batch_is_per_topic() -> None:
    reg = registry()
    create(reg, ("foo", 1), ("bar", 1))
    res = reg.create_partitions([("foo", 2), ("nope", 2), ("bar", 1)])
    assert [(t.name, t.error_code, t.num_partitions) for t in res.response] == [  # type: ignore[union-attr]
        ("foo", ErrorCode.NONE, 2),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0),
        ("bar", ErrorCode.INVALID_PARTITIONS, 0),
    ]


def assert_duplicate_refused(results: list[TopicResult], name: str) -> None:
    mine = [t for t in results if t.name == name]
    assert mine
    assert all(t.error_code == ErrorCode.INVALID_REQUEST for t in mine), mine
    assert all("Duplicate topic name" in (t.error_message or "") for t in mine), mine


def test_add_partitions_duplicate_names_are_refused() -> None:
    """Kafka (CreatePartitions): a name listed twice is answered INVALID_REQUEST "Duplicate topic
    name." and that topic is left alone; the other topics are processed."""
    reg = registry()
    create(reg, ("foo", 1), ("bar", 1))
    res = reg.create_partitions([("bar", 2), ("foo", 2), ("bar", 4)])
    assert_duplicate_refused(res.response, "bar")  # type: ignore[arg-type]
    assert reg.topics["bar"].num_partitions == 1
    assert reg.topics["foo"].num_partitions == 2
    assert res.records == [r.topic_record("foo", ID1, 2)]


# ------------------------------------------------------------------------ delete


def test_delete_topics() -> None:
    reg = registry()
    create(reg, ("foo", 3), ("bar", 1))
    res = reg.delete_topics(["foo", "nope"])
    assert res.response == [
        TopicResult(name="foo", topic_id=ID1, num_partitions=3),
        error("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
    ]
    assert res.records == [r.topic_record("foo", None)]
    assert sorted(reg.topics) == ["bar"]
    assert "foo" not in reg.image().by_name and ID1 not in reg.image().by_id


def test_delete_duplicate_names_are_refused() -> None:
    """Kafka (DeleteTopics): a name listed twice is answered INVALID_REQUEST "Duplicate topic
    name." and that topic is not deleted."""
    reg = registry()
    create(reg, ("foo", 1), ("bar", 1))
    res = reg.delete_topics(["foo", "bar", "foo"])
    assert_duplicate_refused(res.response, "foo")  # type: ignore[arg-type]
    assert sorted(reg.topics) == ["foo"]
    assert res.records == [r.topic_record("bar", None)]


def test_recreated_topic_gets_a_new_id() -> None:
    reg = registry()
    create(reg, ("foo", 3))
    reg.delete_topics(["foo"])
    assert create(reg, ("foo", 3)) == [TopicResult(name="foo", topic_id=ID2, num_partitions=3)]
    assert reg.image().by_name["foo"].topic_id == ID2
    assert set(reg.image().by_id) == {ID2}


# ------------------------------------------------------------------------ images, replay, rollback


def test_image_version_increases_with_every_change_and_only_then() -> None:
    reg = registry()
    v0 = reg.image()
    assert v0 == TopicsImage() and v0.version == 0
    create(reg, ("foo", 1))
    v1 = reg.image()
    assert v1.version > v0.version
    assert reg.image() is v1  # no change: same image
    reg.create_partitions([("foo", 2)])
    v2 = reg.image()
    reg.delete_topics(["foo"])
    v3 = reg.image()
    create(reg, ("foo", 1))
    v4 = reg.image()
    assert v0.version < v1.version < v2.version < v3.version < v4.version
    # Failed operations change nothing.
    create(reg, ("foo", 1))
    reg.delete_topics(["nope"])
    assert reg.image() is v4
    # Images are immutable snapshots.
    assert v1.by_name["foo"].num_partitions == 1 and v2.by_name["foo"].num_partitions == 2
    assert v3.by_name == {}


def test_image_indexes_agree() -> None:
    reg = registry()
    create(reg, ("foo", 3), ("bar", 1))
    image = reg.image()
    assert image.by_name == {"foo": TopicImage(ID1, "foo", 3), "bar": TopicImage(ID2, "bar", 1)}
    assert image.by_id == {ID1: TopicImage(ID1, "foo", 3), ID2: TopicImage(ID2, "bar", 1)}


def test_replay_rebuilds_the_registry() -> None:
    reg = registry()
    recs = []
    recs += reg.create_topics(
        [NewTopic(name="foo", num_partitions=3), NewTopic(name="bar", num_partitions=1)]
    ).records
    recs += reg.create_partitions([("foo", 4)]).records
    recs += reg.delete_topics(["bar"]).records
    recs += reg.create_topics([NewTopic(name="bar", num_partitions=2)]).records
    fresh = registry()
    for rec in recs:
        fresh.replay(rec)
    assert fresh.list_topics() == reg.list_topics()
    assert fresh.image().by_name == reg.image().by_name


def test_replay_refuses_group_records() -> None:
    with pytest.raises(IllegalStateError, match="not a cluster-level record"):
        registry().replay(r.group_epoch_record("g", 1, "cgp_x"))


def test_rollback_restores_topics_and_invalidates_the_image() -> None:
    reg = registry()
    create(reg, ("foo", 1))
    reg.release(reg.mark())
    before = reg.image()
    m = reg.mark()
    create(reg, ("bar", 1))
    reg.delete_topics(["foo"])
    assert sorted(reg.image().by_name) == ["bar"]
    reg.rollback(m)
    after = reg.image()
    assert after.by_name == before.by_name
    assert after.version > before.version  # a new image, never a reused version number
    assert sorted(reg.topics) == ["foo"]


# ------------------------------------------------------------ what a Kafka CreateTopics asks besides

NO_PLACEMENT = (
    "The coordinator's topic registry places no replicas: give a number of partitions instead"
    " of a manual assignment."
)


def test_a_kafka_create_topics_is_checked_in_the_order_of_kafkas_controller() -> None:
    """Configs, a manual assignment, the replication factor, the count (Kafka's
    ReplicationControlManager.createTopic), after the name and "already exists"; the registry
    keeps one replica of each partition, no configs and no placement."""
    reg = registry()
    create(reg, ("exists", 1))

    def t(name: str, count: int = 3, **extra: object) -> NewTopic:
        return NewTopic(name=name, num_partitions=count, **extra)  # type: ignore[arg-type]

    out = create(
        reg,
        t("exists", replication_factor=3, configs=("retention.ms",)),
        t("bad name!", replication_factor=3),
        t("configs", configs=("retention.ms", "cleanup.policy"), replication_factor=0),
        t("manual-rf", -1, assignments=2, replication_factor=1),
        t("manual-count", 2, assignments=2),
        t("manual", -1, assignments=2),
        t("rf0", 0, replication_factor=0),
        t("rf-2", replication_factor=-2),
        t("count0", 0, replication_factor=3),
        t("rf3", replication_factor=3),
        t("rf1", replication_factor=1),
        t("default", -1),
    )
    assert out == [
        error("exists", ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'exists' already exists."),
        error(
            "bad name!",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            'Topic name "bad name!" is illegal, it contains a character other than ASCII'
            " alphanumerics, '.', '_' and '-'",
        ),
        error(
            "configs",
            ErrorCode.INVALID_CONFIG,
            "The coordinator's topic registry keeps no topic configs; asked: retention.ms,"
            " cleanup.policy.",
        ),
        error(
            "manual-rf",
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not set"
            " to -1.",
        ),
        error(
            "manual-count",
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
        error("manual", ErrorCode.INVALID_REPLICA_ASSIGNMENT, NO_PLACEMENT),
        error(
            "rf0",
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        error(
            "rf-2",
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        error(
            "count0",
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        error(
            "rf3",
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Unable to replicate the partition 3 time(s): the coordinator's topic registry"
            " keeps one replica of each partition.",
        ),
        TopicResult(name="rf1", topic_id=ID2, num_partitions=3),
        TopicResult(name="default", topic_id=ID3, num_partitions=1),
    ]
    assert sorted(reg.topics) == ["default", "exists", "rf1"]


def test_manual_assignments_of_new_partitions_are_refused_after_the_count() -> None:
    """Kafka's createPartitions checks the topic and the count first, then the assignments."""
    reg = registry()
    create(reg, ("foo", 3), ("bar", 3))
    image = reg.image()
    res = reg.create_partitions(
        [("nope", 5), ("foo", 3), ("bar", 5), ("foo2", 4)], assignments={"nope": 2, "foo": 1}
    )
    assert res.response == [
        error("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
        error("foo", ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s)."),
        TopicResult(name="bar", topic_id=ID2, num_partitions=5),
        error("foo2", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'foo2' does not exist."),
    ]
    res = reg.create_partitions([("foo", 5), ("bar", 6)], assignments={"foo": 1, "bar": 1})
    assert res.response == [
        error(
            "foo",
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        error("bar", ErrorCode.INVALID_REPLICA_ASSIGNMENT, NO_PLACEMENT),
    ]
    assert res.records == []
    assert reg.image() is not image and reg.topics["bar"].num_partitions == 5
    assert reg.topics["foo"].num_partitions == 3
