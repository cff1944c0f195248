"""Conflicting authorities (issue 25 item 3): a program check that finds two authoritative sources
disagreeing in the evidence an artifact rests on hands the run to a person with both sources' statements;
``choose_a`` / ``choose_b`` is recorded as a fact of the run and the item is attempted again with it;
``accept_partial`` and ``cancel`` end the run as at any handoff."""

from __future__ import annotations

from typing import Any

import pytest
from tests.controllers.test_plan_run import GOAL, events
from tests.controllers.test_plan_run_facts import ONE, agent_for, ended, search_then_record

from stateward import RunStatus, Runtime
from stateward.core.errors import RequestRefusedError
from stateward.core.events import EventType
from stateward.verify import ArtifactCheckInput, AuthorityConflict, CheckResult, CheckVerdict, SourceStatement

KEY = "retry_limit"


def sources_agree(seen: list[dict[str, str]]) -> Any:
    """A check over the cited search: the guide says 3 and the release notes 5 for ``KEY`` (both cite the
    search's evidence id), unless a person already chose the source that holds."""

    def official_sources_agree(given: ArtifactCheckInput) -> CheckResult:
        seen.append(dict(given.chosen_sources))
        [obs] = given.cited("search")
        evidence = obs.result["hits"][0]["evidence_id"]
        if given.chosen_sources.get(KEY) in ("guide", "release-notes"):
            return CheckResult(name="official_sources_agree", verdict=CheckVerdict.PASS, detail="settled")
        conflict = AuthorityConflict(
            key=KEY,
            statements=(
                SourceStatement(source="guide", evidence_id=evidence, statement="retry_limit = 3"),
                SourceStatement(source="release-notes", evidence_id=evidence, statement="retry_limit = 5"),
            ),
        )
        return CheckResult(
            name="official_sources_agree", verdict=CheckVerdict.FAIL, detail="disagree", conflict=conflict
        )

    return official_sources_agree


def handed_off(runtime: Runtime) -> tuple[Any, list[dict[str, str]]]:
    seen: list[dict[str, str]] = []
    agent = agent_for(ONE, search_then_record({"count": 1}), checks={"findings": [sources_agree(seen)]})
    return runtime.start(agent, GOAL.objective), seen


def test_two_authorities_disagreeing_hand_off_with_both_statements_and_a_choice(runtime: Runtime) -> None:
    state, _ = handed_off(runtime)
    assert state.status is RunStatus.WAITING_FOR_USER and state.pending is not None
    assert state.pending.kind.value == "handoff"
    [package] = events(runtime, state.run_id, EventType.HANDOFF_RECORDED)
    assert package["reason_code"] == "CONFLICTING_AUTHORITIES"
    assert "guide" in package["reason"] and "release-notes" in package["reason"]
    assert "retry_limit = 3" in package["reason"] and "retry_limit = 5" in package["reason"]
    assert "ev:W1" in package["evidence_refs"] and package["resume_point"]["work_item_id"] == "W1"
    options = [o["option_id"] for o in package["options"]]
    assert options == ["choose_a", "choose_b", "accept_partial", "cancel"]
    assert all(o["consequence"] for o in package["options"])
    # No retry or repair can settle a conflict: one attempt, failed by name, before a person is asked.
    assert [e["error"] for e in ended(runtime, state.run_id, "W1")] == ["CONFLICTING_AUTHORITIES"]
    [verification] = events(runtime, state.run_id, EventType.VERIFICATION_RECORDED)
    [check] = [c for c in verification["checks"] if c["name"] == "official_sources_agree"]
    assert [s["source"] for s in check["conflict"]["statements"]] == ["guide", "release-notes"]


def test_choosing_a_source_records_it_and_re_attempts_the_item_with_it(runtime: Runtime) -> None:
    state, seen = handed_off(runtime)
    assert state.pending is not None
    state = runtime.reply(state.run_id, state.pending.request_id, by="rules-owner", text="choose_b").state
    [answered] = events(runtime, state.run_id, EventType.HANDOFF_ANSWERED)
    assert answered["source_choice"]["source"] == "release-notes" and answered["source_choice"]["key"] == KEY
    assert answered["source_choice"]["by"] == "rules-owner" and answered["grant"]["reattempt"] == {"W1": 2}
    assert seen == [{}, {KEY: "release-notes"}]  # the check saw the choice on the new attempt
    starts = [e for e in events(runtime, state.run_id, EventType.WORK_ITEM_STARTED) if e["work_item_id"] == "W1"]
    assert len(starts) == 2
    assert state.status is RunStatus.COMPLETED and "W1" in state.memo["verified"]
    assert state.memo["source_choices"][KEY]["source"] == "release-notes"


def test_an_answer_naming_neither_source_is_refused_by_name_and_records_nothing(runtime: Runtime) -> None:
    state, seen = handed_off(runtime)
    assert state.pending is not None
    first = state.pending.request_id
    with pytest.raises(RequestRefusedError) as err:
        runtime.reply(state.run_id, first, by="rules-owner", text="choose_c")
    assert err.value.code == "UNKNOWN_OPTION"
    state = runtime.get(state.run_id)
    assert state.pending is not None and state.pending.request_id == first and seen == [{}]
    assert not events(runtime, state.run_id, EventType.HANDOFF_ANSWERED) and not state.memo["source_choices"]


def test_accept_partial_and_cancel_end_a_conflict_as_at_any_handoff(runtime: Runtime) -> None:
    for option, status in (("accept_partial", RunStatus.PARTIALLY_COMPLETED), ("cancel", RunStatus.FAILED)):
        state, seen = handed_off(runtime)
        assert state.pending is not None
        state = runtime.reply(state.run_id, state.pending.request_id, by="lead", text=option).state
        assert state.status is status and seen == [{}], option
        assert len(ended(runtime, state.run_id, "W1")) == 1  # no new attempt
