"""Bounded local ReAct: the loop stops when it stops learning, not when the model says so."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from stateward.planning import (
    BudgetRemaining,
    NoProgressRule,
    ProgressSignal,
    ProgressTracker,
    ReactDecisionSummary,
    StepRecord,
    normalize_query,
)
from stateward.planning.progress import ProgressConfig, jaccard

S = ProgressSignal


def step(action: str = "search_code", result: str = "r", evidence: tuple[str, ...] = ("e",), **kw: Any) -> StepRecord:
    args = kw.pop("args", {"query": "PaymentGateway"})
    return StepRecord(action=action, args=args, result_hash=result, new_evidence_ids=evidence, **kw)


def run(tracker: ProgressTracker, *steps: StepRecord) -> tuple[ProgressTracker, list[ProgressSignal]]:
    signals = []
    for s in steps:
        tracker, verdict = tracker.observe(s)
        signals.append(verdict.signal)
    return tracker, signals


def test_query_normalisation_lowercases_strips_punctuation_sorts_and_drops_stopwords() -> None:
    assert normalize_query("Where is the PaymentGateway, used?") == ("paymentgateway", "used")
    assert normalize_query("used: paymentgateway!") == normalize_query("Where is the PaymentGateway, used?")
    assert jaccard(("a", "b", "c", "d", "e"), ("a", "b", "c", "d")) == 0.8
    assert jaccard((), ()) == 1.0


def test_progressing_steps_continue_until_the_step_limit() -> None:
    t = ProgressTracker.start(3)
    steps = [
        step(result=f"r{i}", evidence=(f"e{i}",), args={"query": q}) for i, q in enumerate(["alpha", "beta", "gamma"])
    ]
    t, signals = run(t, *steps)
    assert signals == [S.CONTINUE, S.CONTINUE, S.STEP_LIMIT]
    assert t.before_step().signal is S.STEP_LIMIT
    assert t.remaining_steps() == 0


def test_same_result_hash_twice_in_a_row_is_no_progress() -> None:
    t = ProgressTracker.start(10)
    t, v = t.observe(step(result="h1", evidence=("e1",), args={"query": "PaymentGateway"}))
    t, v = t.observe(step(result="h1", evidence=("e2",), args={"query": "LegacyCharge"}))
    assert (v.signal, v.rule) == (S.NO_PROGRESS, NoProgressRule.SAME_RESULT)


def test_two_steps_without_new_evidence_is_no_progress_and_seen_evidence_is_not_new() -> None:
    t = ProgressTracker.start(10)
    t, v = t.observe(step(result="h1", evidence=("e1",), args={"query": "alpha"}))
    t, v = t.observe(step(result="h2", evidence=("e1",), args={"query": "beta"}))  # e1 again: not new
    assert v.signal is S.CONTINUE
    t, v = t.observe(step(result="h3", evidence=(), args={"query": "gamma"}))
    assert (v.signal, v.rule) == (S.NO_PROGRESS, NoProgressRule.NO_NEW_EVIDENCE)


def test_one_step_without_evidence_followed_by_new_evidence_continues() -> None:
    t = ProgressTracker.start(10)
    t, signals = run(
        t,
        step(result="h1", evidence=(), args={"query": "alpha"}),
        step(result="h2", evidence=("e1",), args={"query": "beta"}),
        step(result="h3", evidence=(), args={"query": "gamma"}),
    )
    assert signals == [S.CONTINUE, S.CONTINUE, S.CONTINUE]


def test_repeating_an_action_that_failed_with_the_same_args_is_no_progress() -> None:
    t = ProgressTracker.start(10)
    args = {"repo": "payments-core", "path": "src/gateway.py"}
    t, v = t.observe(step("read_file", "err", (), args=args, succeeded=False, error_code="TIMEOUT"))
    assert v.signal is S.CONTINUE
    # Proposed again (keys in another order): refused before it costs anything.
    proposal = t.before_step(action="read_file", args={"path": "src/gateway.py", "repo": "payments-core"})
    assert (proposal.signal, proposal.rule) == (S.NO_PROGRESS, NoProgressRule.REPEATED_FAILED_ACTION)
    assert t.before_step(action="read_file", args={**args, "path": "src/other.py"}).signal is S.CONTINUE
    t, v = t.observe(step("read_file", "ok", ("e9",), args=dict(reversed(list(args.items())))))
    assert (v.signal, v.rule) == (S.NO_PROGRESS, NoProgressRule.REPEATED_FAILED_ACTION)


def test_a_reworded_query_is_no_progress() -> None:
    t = ProgressTracker.start(10)
    t, _ = t.observe(step(result="h1", evidence=("e1",), args={"query": "PaymentGateway usage"}))
    t, v = t.observe(step(result="h2", evidence=("e2",), args={"query": "Usage of the PaymentGateway?"}))
    assert (v.signal, v.rule) == (S.NO_PROGRESS, NoProgressRule.REWORDED_QUERY)


def test_similar_queries_below_the_threshold_or_against_another_target_continue() -> None:
    t = ProgressTracker.start(10)
    t, _ = t.observe(step(result="h1", evidence=("e1",), args={"query": "payment gateway charge refund", "repo": "a"}))
    # 4 of 5 tokens shared: Jaccard 0.8 -> same
    assert t.before_step(
        action="search_code", args={"query": "payment gateway charge refund capture", "repo": "a"}
    ).rule
    # 3 of 5: 0.6 -> a different question
    assert (
        t.before_step(action="search_code", args={"query": "payment gateway charge void", "repo": "a"}).signal
        is S.CONTINUE
    )
    # the same words against another repository, or with another tool, are new work
    assert (
        t.before_step(action="search_code", args={"query": "payment gateway charge refund", "repo": "b"}).signal
        is S.CONTINUE
    )
    assert (
        t.before_step(action="search_docs", args={"query": "payment gateway charge refund", "repo": "a"}).signal
        is S.CONTINUE
    )


def test_budget_exhausted_and_pause_requested_stop_the_loop_with_pause_first() -> None:
    t = ProgressTracker.start(10)
    empty = BudgetRemaining(tool_calls=0)
    assert t.before_step(remaining=empty).signal is S.BUDGET_EXHAUSTED
    assert t.before_step(remaining=BudgetRemaining(tool_calls=1, model_calls=None)).signal is S.CONTINUE
    assert t.before_step(remaining=empty, pause_requested=True).signal is S.PAUSE_REQUESTED
    t, v = t.observe(step(), remaining=empty)
    assert v.signal is S.BUDGET_EXHAUSTED
    t, v = t.observe(step(result="x", args={"query": "PaymentGateway"}), remaining=empty, pause_requested=True)
    assert v.signal is S.PAUSE_REQUESTED


def test_no_progress_on_the_last_allowed_step_is_reported_as_no_progress() -> None:
    t = ProgressTracker.start(2)
    t, _ = t.observe(step(result="h", evidence=("e1",), args={"query": "alpha"}))
    t, v = t.observe(step(result="h", evidence=("e2",), args={"query": "beta"}))
    assert v.signal is S.NO_PROGRESS


def test_every_loop_stops_within_max_react_steps() -> None:
    t = ProgressTracker.start(5)
    taken = 0
    while not t.before_step().should_stop:
        t, v = t.observe(step(result=f"r{taken}", evidence=(f"e{taken}",), args={"query": f"q{taken} x{taken}"}))
        taken += 1
        if v.should_stop:
            break
    assert taken == 5 and v.signal is S.STEP_LIMIT


def test_tracker_survives_serialisation_and_keeps_detecting() -> None:
    t = ProgressTracker.start(10)
    t, _ = t.observe(step("read_file", "err", (), args={"path": "a"}, succeeded=False))
    restored = ProgressTracker.model_validate_json(t.model_dump_json())
    assert restored == t
    assert restored.before_step(action="read_file", args={"path": "a"}).rule is NoProgressRule.REPEATED_FAILED_ACTION


def test_partial_result_carries_reason_and_evidence() -> None:
    t = ProgressTracker.start(10)
    t, _ = t.observe(step(result="h1", evidence=("obs-31", "obs-32"), args={"query": "alpha"}))
    t, v = t.observe(step(result="h1", evidence=(), args={"query": "beta"}))
    partial = t.partial_result(v, found=["PaymentGateway wraps the SDK in payments-core"])
    assert partial.reason is S.NO_PROGRESS and partial.rule is NoProgressRule.SAME_RESULT
    assert partial.evidence_refs == ("obs-31", "obs-32") and partial.steps_taken == 2


def test_decision_summary_matches_the_reference_record_and_keeps_the_reason_short() -> None:
    doc = {
        "decision_id": "decision-801",
        "work_item_id": "W10",
        "objective": "find indirect SDK calls",
        "observation_refs": ["obs-31", "obs-32"],
        "selected_action": {"tool": "search_code", "arguments": {"query": "PaymentGateway"}},
        "reason_summary": "direct SDK search has low coverage; locate the internal wrapper class",
        "remaining_steps": 3,
    }
    assert ReactDecisionSummary.model_validate(doc).selected_action.tool == "search_code"
    with pytest.raises(ValidationError):
        ReactDecisionSummary.model_validate({**doc, "reason_summary": "thinking... " * 40})
    with pytest.raises(ValidationError):
        ReactDecisionSummary.model_validate({**doc, "hidden_reasoning": "..."})


def test_confidence_not_rising_while_budget_is_spent_is_no_progress() -> None:
    # New evidence every step, so only the confidence rule can see that the loop is not getting anywhere.
    t = ProgressTracker.start(10, max_steps_without_confidence_gain=2)
    for i, c in enumerate([0.4, 0.4, 0.3]):
        t, verdict = t.observe(step(result=f"r{i}", evidence=(f"e{i}",), args={"query": f"q{i}"}, confidence=c))
    assert (verdict.signal, verdict.rule) == (S.NO_PROGRESS, NoProgressRule.CONFIDENCE_NOT_RISING)
    assert "0.4" in verdict.detail and t.steps_without_confidence_gain == 2


def test_rising_confidence_resets_the_streak_and_unmeasured_loops_are_not_judged_by_it() -> None:
    rising = [
        step(result=f"r{i}", evidence=(f"e{i}",), args={"query": f"q{i}"}, confidence=c)
        for i, c in enumerate([0.4, 0.4, 0.5, 0.5, 0.6])
    ]
    _, signals = run(ProgressTracker.start(10, max_steps_without_confidence_gain=2), *rising)
    assert signals == [S.CONTINUE] * 5
    unmeasured = [step(result=f"r{i}", evidence=(f"e{i}",), args={"query": f"q{i}"}) for i in range(5)]
    t, signals = run(ProgressTracker.start(10, max_steps_without_confidence_gain=1), *unmeasured)
    assert signals == [S.CONTINUE] * 5
    assert t.best_confidence is None
    # Once measured, a step that measures nothing does not raise it either.
    _, signals = run(ProgressTracker.start(10, max_steps_without_confidence_gain=2), rising[0], *unmeasured[1:3])
    assert signals == [S.CONTINUE, S.CONTINUE, S.NO_PROGRESS]


def test_a_confidence_must_be_a_finite_number_between_zero_and_one() -> None:
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValidationError):
            step(confidence=bad)


def test_a_config_is_stored_as_the_same_text_by_every_process() -> None:
    """Its stopwords are a set, whose own order follows each process's string hashing: the stored text must
    not, or each process would write the same running record anew."""
    script = "from stateward.planning.progress import ProgressConfig as C;print(C(max_react_steps=3).model_dump_json())"
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(texts) == 1
    [text] = texts
    config = ProgressConfig.model_validate_json(text)
    assert config.stopwords == ProgressConfig(max_react_steps=3).stopwords  # and it reads back the same set
