"""Runs the checks: fixed cases, the hypothesis exploration, shrinking, and the hash-seed runs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping

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
    STICKINESS,
    UNKNOWN_TOPIC,
    Figures,
    evaluate,
)
from assignors.conformance._model import Scenario, random_scenario, topic_id_from_bytes

HASH_SEED_VALUES = ("0", "1", "4242")
HASH_SEED_GROUPS = 40
SUBPROCESS_TIMEOUT_S = 120
SHRINK_BUDGET = 300
"""Evaluations allowed for shrinking one failing check, beyond the exploration's count."""


class _StopSearch(BaseException):
    """Ends a shrinking search that ran out of budget."""


class _Found(Exception):
    def __init__(self, message: str, scenario: Scenario) -> None:
        super().__init__(message)
        self.message, self.scenario = message, scenario


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
        outcome = evaluate(assignor, scenario)
        count += 1
        figures.add(outcome.figures)
        for name, message in outcome.failures.items():
            first_failure.setdefault(name, (message, scenario))
        if outcome.balance_issue and balance_issue is None:
            balance_issue = (outcome.balance_issue, scenario)
        if outcome.stickiness_issue and stickiness_issue is None:
            stickiness_issue = (outcome.stickiness_issue, scenario)

    _hypothesis_run(explore, examples, seed, shrink=False)
    report.figures = figures
    report.examples = count

    for name in PROPERTY_CHECKS:
        if name not in first_failure:
            checks.append(CheckResult(name=name, passed=True, summary=f"{count} groups"))
            continue
        message, scenario = _shrink(assignor, name, examples, seed, first_failure[name])
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


def _hypothesis_run(body: object, examples: int, seed: int, *, shrink: bool) -> None:
    try:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as fix_seed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the conformance kit needs hypothesis: pip install 'hypothesis>=6.100'"
        ) from exc
    from assignors.conformance._strategies import scenarios

    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)

    @fix_seed(seed)
    @settings(
        max_examples=max(1, examples),
        deadline=None,
        database=None,
        derandomize=False,
        phases=phases,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(scenarios())
    def property_run(scenario: Scenario) -> None:
        body(scenario)  # type: ignore[operator]

    property_run()


def _shrink(
    assignor: PartitionAssignor, check: str, examples: int, seed: int, found: tuple[str, Scenario]
) -> tuple[str, Scenario]:
    """Search again raising on ``check`` only, so that hypothesis shrinks towards a small failing
    group. The smallest failing group seen is kept here, and after :data:`SHRINK_BUDGET`
    evaluations nothing more is raised: a flaky failure cannot make shrinking run away."""
    best = found
    calls = 0

    def size(scenario: Scenario) -> tuple[int, ...]:
        return (
            len(scenario.members),
            len(scenario.topics),
            sum(t.partitions for t in scenario.topics),
            len(scenario.describe()),
        )

    def body(scenario: Scenario) -> None:
        nonlocal best, calls
        calls += 1
        if calls > examples + SHRINK_BUDGET:
            raise _StopSearch  # a BaseException: hypothesis lets it through at once
        message = evaluate(assignor, scenario).failures.get(check)
        if message is None:
            return
        if size(scenario) < size(best[1]):
            best = (message, scenario)
        raise _Found(message, scenario)

    try:
        _hypothesis_run(body, examples, seed, shrink=True)
    except _StopSearch:
        pass
    except Exception:  # noqa: BLE001, S110 - _Found, or hypothesis giving up on a flaky failure
        pass
    return best


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
        try:
            result = assignor.assign(scenario.group_spec(), scenario.topic_metadata())
            canonical = _canonical(result.members)
        except Exception as exc:  # noqa: BLE001
            canonical = f"error {type(exc).__name__}"
        h.update(json.dumps(canonical).encode())
    return h.hexdigest()


def _canonical(members: Mapping[str, Mapping[str, frozenset[int]]]) -> list[object]:
    return sorted([m, sorted([t, sorted(ps)] for t, ps in a.items())] for m, a in members.items())


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
