"""Runs the checks: fixed cases, the hypothesis exploration, shrinking, and the hash-seed runs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    SubscriptionType,
    TopicMetadata,
)
from assignors.conformance import CheckResult, ConformanceReport
from assignors.conformance._checks import (
    BALANCE,
    EMPTY_GROUP,
    HASH_SEED,
    INTERFACE,
    PROPERTY_CHECKS,
    RACK_CHECKS,
    STICKINESS,
    UNKNOWN_TOPIC,
    Figures,
    evaluate,
)
from assignors.conformance._model import MemberPlan, Scenario, random_scenario, topic_id_from_bytes

HASH_SEED_VALUES = ("0", "1", "4242")
HASH_SEED_GROUPS = 40
SUBPROCESS_TIMEOUT_S = 120
SHRINK_BUDGET = 400
"""Evaluations allowed for shrinking one failing check."""


def run(
    target: object,
    *,
    examples: int,
    seed: int,
    require_balance: bool,
    require_stickiness: bool,
    hash_seeds: bool,
) -> ConformanceReport:
    assignor, label, class_path = _resolve(target)
    report = ConformanceReport(assignor=label, examples=examples, seed=seed)
    checks = report.checks
    rack_aware = getattr(type(assignor), "rack_aware", False) is True
    report.rack_aware = rack_aware

    problem = _interface_problem(assignor)
    checks.append(
        CheckResult(
            name=INTERFACE, passed=problem is None, summary=problem or f"name {assignor.name!r}"
        )
    )
    if problem:
        return report
    checks.append(_empty_group(assignor))
    checks.append(_unknown_topic(assignor))

    # Exploration: every generated group, every check; nothing raised, so nothing shrinks.
    first_failure: dict[str, tuple[str, Scenario]] = {}
    balance_issue: tuple[str, Scenario] | None = None
    stickiness_issue: tuple[str, Scenario] | None = None
    figures = Figures()
    count = 0

    def explore(scenario: Scenario) -> None:
        nonlocal balance_issue, stickiness_issue, count
        outcome = evaluate(assignor, scenario, rack_aware=rack_aware)
        count += 1
        figures.add(outcome.figures)
        for name, message in outcome.failures.items():
            first_failure.setdefault(name, (message, scenario))
        if outcome.balance_issue and balance_issue is None:
            balance_issue = (outcome.balance_issue, scenario)
        if outcome.stickiness_issue and stickiness_issue is None:
            stickiness_issue = (outcome.stickiness_issue, scenario)

    _hypothesis_run(explore, examples, seed)
    report.figures = figures
    report.examples = count

    for name in (*PROPERTY_CHECKS, *(RACK_CHECKS if rack_aware else ())):
        if name not in first_failure:
            groups = figures.racked if name in RACK_CHECKS else count
            checks.append(CheckResult(name=name, passed=True, summary=f"{groups} groups"))
            continue
        message, scenario = _shrink(assignor, name, first_failure[name], rack_aware)
        checks.append(
            CheckResult(name=name, passed=False, summary=message, example=scenario.describe())
        )

    if hash_seeds:
        checks.append(_hash_seed_check(assignor, class_path, seed))
    if require_balance:
        checks.append(
            _requirement(
                BALANCE,
                balance_issue,
                figures.homogeneous_unbalanced + figures.locally_improvable,
                count,
            )
        )
    if require_stickiness:
        issues = figures.leave_lost_homogeneous + figures.join_moved_between_old_homogeneous
        checks.append(_requirement(STICKINESS, stickiness_issue, issues, count))
    return report


# ---------------------------------------------------------------------- resolution


def _resolve(target: object) -> tuple[PartitionAssignor, str, str | None]:
    """(assignor, label, importable module:Class or None)."""
    if isinstance(target, str):
        from assignors.registry import load_assignor

        assignor = load_assignor(target)
        label = target
    elif isinstance(target, type):
        assignor = target()
        label = f"{target.__module__}:{target.__qualname__}"
    else:
        assignor = target  # type: ignore[assignment]
        label = f"{type(target).__module__}:{type(target).__qualname__}"
    cls = type(assignor)
    class_path: str | None = f"{cls.__module__}:{cls.__qualname__}"
    if "<" in cls.__qualname__ or cls.__module__ == "__main__":
        class_path = None
    name = getattr(assignor, "name", "?")
    if label != name:
        label = f"{name} ({label})"
    return assignor, label, class_path


def _interface_problem(assignor: object) -> str | None:
    name = getattr(type(assignor), "name", None)
    if not isinstance(name, str) or not name:
        return "the class needs a class attribute 'name' (a non-empty str)"
    if not callable(getattr(assignor, "assign", None)):
        return "no assign(group_spec, topics) method"
    if not isinstance(assignor, PartitionAssignor):
        return "not a PartitionAssignor"
    return None


# ---------------------------------------------------------------------- fixed cases


def _empty_group(assignor: PartitionAssignor) -> CheckResult:
    topic = topic_id_from_bytes(bytes(16))
    topics = {topic: TopicMetadata(topic_id=topic, name="topic-0", num_partitions=3)}
    for meta in ({}, topics):
        spec = GroupSpec(members={}, subscription_type=SubscriptionType.HOMOGENEOUS)
        try:
            result = assignor.assign(spec, meta)
        except Exception as exc:  # noqa: BLE001
            return CheckResult(
                name=EMPTY_GROUP, passed=False, summary=f"raised {type(exc).__name__}: {exc}"
            )
        if not isinstance(result, GroupAssignment) or len(result.members) != 0:
            return CheckResult(
                name=EMPTY_GROUP,
                passed=False,
                summary=f"expected GroupAssignment(members={{}}), got {result!r}",
            )
    return CheckResult(name=EMPTY_GROUP, passed=True, summary="empty result")


def _unknown_topic(assignor: PartitionAssignor) -> CheckResult:
    known, unknown = topic_id_from_bytes(bytes(16)), topic_id_from_bytes(bytes([1] * 16))
    topics = {known: TopicMetadata(topic_id=known, name="known", num_partitions=4)}

    def member(subs: frozenset[str]) -> MemberSubscription:
        return MemberSubscription(
            rack_id=None, instance_id=None, subscribed_topic_ids=subs, assignment={}
        )

    cases = {
        "homogeneous": GroupSpec(
            members={
                "a": member(frozenset({known, unknown})),
                "b": member(frozenset({known, unknown})),
            },
            subscription_type=SubscriptionType.HOMOGENEOUS,
        ),
        "heterogeneous": GroupSpec(
            members={"a": member(frozenset({known})), "b": member(frozenset({unknown}))},
            subscription_type=SubscriptionType.HETEROGENEOUS,
        ),
    }
    for label, spec in cases.items():
        try:
            result = assignor.assign(spec, topics)
        except PartitionAssignorError:
            continue
        except Exception as exc:  # noqa: BLE001
            return CheckResult(
                name=UNKNOWN_TOPIC,
                passed=False,
                summary=f"{label} group: raised {type(exc).__name__} instead of PartitionAssignorError: {exc}",
            )
        return CheckResult(
            name=UNKNOWN_TOPIC,
            passed=False,
            summary=f"{label} group subscribed to a topic missing from the metadata: returned {type(result).__name__} instead of raising PartitionAssignorError",
        )
    return CheckResult(name=UNKNOWN_TOPIC, passed=True, summary="raises PartitionAssignorError")


# ---------------------------------------------------------------------- hypothesis


def _hypothesis_run(body: object, examples: int, seed: int) -> None:
    try:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as fix_seed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the conformance kit needs hypothesis: pip install 'hypothesis>=6.100'"
        ) from exc
    from assignors.conformance._strategies import scenarios

    @fix_seed(seed)
    @settings(
        max_examples=max(1, examples),
        deadline=None,
        database=None,
        derandomize=False,
        phases=(Phase.generate,),  # failures are shrunk by _shrink, structurally
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(scenarios())
    def property_run(scenario: Scenario) -> None:
        body(scenario)  # type: ignore[operator]

    property_run()


def _shrink(
    assignor: PartitionAssignor, check: str, found: tuple[str, Scenario], rack_aware: bool
) -> tuple[str, Scenario]:
    """Greedily simplify a failing group while ``check`` still fails: drop members and topics,
    cut partition counts, clear current assignments, racks and instance ids. Deterministic, and
    bounded by :data:`SHRINK_BUDGET` evaluations."""
    message, best = found
    budget = SHRINK_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        for candidate in _simpler(best):
            if budget <= 0:
                break
            budget -= 1
            failure = evaluate(assignor, candidate, rack_aware=rack_aware).failures.get(check)
            if failure is not None:
                message, best = failure, candidate
                improved = True
                break
    return message, best


def _simpler(sc: Scenario) -> list[Scenario]:
    """Candidate simplifications of a scenario, most drastic first."""
    out: list[Scenario] = []
    members, topics = sc.members, sc.topics
    for j in range(len(members)):
        if len(members) > 1:
            out.append(replace(sc, members=members[:j] + members[j + 1 :]))
    for i, t in enumerate(topics):
        if len(topics) > 1:
            rest = topics[:i] + topics[i + 1 :]
            out.append(
                replace(
                    sc, topics=rest, members=tuple(_without_topic(m, t.topic_id) for m in members)
                )
            )
    for i, t in enumerate(topics):
        for smaller in sorted({1, t.partitions // 2}):
            if 0 < smaller < t.partitions:
                cut = replace(
                    t, partitions=smaller, racks=tuple(r for r in t.racks if r[0] < smaller)
                )
                out.append(
                    replace(
                        sc,
                        topics=topics[:i] + (cut,) + topics[i + 1 :],
                        members=tuple(_cut_partitions(m, t.topic_id, smaller) for m in members),
                    )
                )
    for j, m in enumerate(members):
        for simpler in (
            replace(m, current=()) if m.current else None,
            replace(m, rack_id=None) if m.rack_id is not None else None,
            replace(m, instance_id=None) if m.instance_id is not None else None,
        ):
            if simpler is not None:
                out.append(replace(sc, members=members[:j] + (simpler,) + members[j + 1 :]))
    if any(t.racks for t in topics):
        out.append(replace(sc, topics=tuple(replace(t, racks=()) for t in topics)))
    if sc.joiner_subscription is not None:
        out.append(replace(sc, joiner_subscription=None))
    return out


def _without_topic(m: MemberPlan, topic_id: str) -> MemberPlan:
    return replace(
        m,
        subscription=tuple(t for t in m.subscription if t != topic_id),
        current=tuple((t, ps) for t, ps in m.current if t != topic_id),
    )


def _cut_partitions(m: MemberPlan, topic_id: str, count: int) -> MemberPlan:
    current = []
    for t, ps in m.current:
        kept = tuple(p for p in ps if t != topic_id or p < count)
        if kept:
            current.append((t, kept))
    return replace(m, current=tuple(current))


def _requirement(
    name: str, issue: tuple[str, Scenario] | None, failures: int, count: int
) -> CheckResult:
    if not failures:
        return CheckResult(name=name, passed=True, summary=f"{count} groups")
    message, scenario = issue if issue else ("", None)
    return CheckResult(
        name=name,
        passed=False,
        summary=f"{failures} case(s); first: {message}",
        example=scenario.describe() if scenario else "",
    )


# ---------------------------------------------------------------------- hash seeds


def digest_results(assignor: PartitionAssignor, seed: int, groups: int = HASH_SEED_GROUPS) -> str:
    """A digest of the assignor's results on seeded groups (the same in every interpreter)."""
    rng = random.Random(seed)
    h = hashlib.sha256()
    for _ in range(groups):
        scenario = random_scenario(rng)
        canonical: object
        try:
            result = assignor.assign(scenario.group_spec(), scenario.topic_metadata())
            canonical = _canonical(result.members)
        except Exception as exc:  # noqa: BLE001
            canonical = f"error {type(exc).__name__}"
        h.update(json.dumps(canonical).encode())
    return h.hexdigest()


def _canonical(
    members: Mapping[str, Mapping[str, frozenset[int]]],
) -> list[tuple[str, list[tuple[str, list[int]]]]]:
    """Members sorted, each with its topics sorted, each with its partitions sorted (JSON:
    nested arrays)."""
    return sorted((m, sorted((t, sorted(ps)) for t, ps in a.items())) for m, a in members.items())


def _hash_seed_check(assignor: PartitionAssignor, class_path: str | None, seed: int) -> CheckResult:
    if class_path is None:
        return CheckResult(
            name=HASH_SEED,
            passed=True,
            summary="skipped: the class cannot be imported by module:Class in another interpreter",
        )
    digests = {"this interpreter": digest_results(assignor, seed)}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for value in HASH_SEED_VALUES:
        env["PYTHONHASHSEED"] = value
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "assignors.conformance._hashseed", class_path, str(seed)],
                capture_output=True,
                text=True,
                env=env,
                timeout=SUBPROCESS_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CheckResult(
                name=HASH_SEED, passed=False, summary=f"PYTHONHASHSEED={value}: timed out"
            )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return CheckResult(
                name=HASH_SEED, passed=False, summary=f"PYTHONHASHSEED={value}: {tail}"
            )
        digests[f"PYTHONHASHSEED={value}"] = proc.stdout.strip()
    if len(set(digests.values())) == 1:
        return CheckResult(
            name=HASH_SEED,
            passed=True,
            summary=f"{HASH_SEED_GROUPS} groups, identical under {len(digests)} hash seeds",
        )
    differing = ", ".join(k for k, v in digests.items() if v != digests["this interpreter"])
    return CheckResult(
        name=HASH_SEED,
        passed=False,
        summary=f"results differ between interpreters ({differing}): the assignor depends on hash() or set order",
    )
