"""Every reply contract's sent schema admits exactly documents the Runtime's parser for that contract accepts.

For each document a model is asked for (a decision, a step plan, a plan document, a plan patch, a workflow
node's content, a model check's judgement) the schema is taken as the providers send it
(``contracts.response_schema`` of the request the controller builds): documents drawn at random from that
schema must parse, and the documents the Runtime accepts (the payment case's plan, canonical patches,
judgements, decisions) must validate under it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import stateward_demos
from stateward.controllers.plan_execute import parse_step_plan
from stateward.controllers.replies import document_request
from stateward.core.contract import SignalFailure
from stateward.core.decision import parse_decision
from stateward.core.errors import ErrorCode, UserError
from stateward.core.model_io import ActionSpec, ModelRequest, ReplyContract
from stateward.models import contracts
from stateward.planning.patch import PlanPatch, ReplanReason, load_patch
from stateward.planning.plan import Plan, load_plan
from stateward.verify.checks import ModelJudgement

PAYMENT_PLAN = Path(stateward_demos.__file__).parent / "payment" / "plan.json"
BRIEF = ActionSpec(
    name="create_brief",
    description="Write the brief.",
    input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "outline": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "words": {"type": "integer", "minimum": 10},
        },
        "required": ["title", "outline"],
        "additionalProperties": False,
    },
)
READ = ActionSpec(
    name="read_material",
    input_schema={
        "type": "object",
        "properties": {"material_id": {"type": "string", "enum": ["m1", "m2"]}},
        "required": ["material_id"],
        "additionalProperties": False,
    },
)


def request_for(contract: ReplyContract) -> ModelRequest:
    """The request as its controller builds it (the document contracts through ``document_request``)."""
    if contract in (ReplyContract.PLAN_DOCUMENT, ReplyContract.PLAN_PATCH, ReplyContract.CHECK_JUDGEMENT):
        return document_request(contract, purpose="plan", goal="g", visible_actions=[READ, BRIEF])
    actions = [BRIEF] if contract is ReplyContract.NODE_CONTENT else [READ, BRIEF]
    return ModelRequest(purpose="decide", contract=contract, goal="g", visible_actions=actions)


def _accepts_decision(text: str) -> None:
    decision = parse_decision(text)
    if decision.action is not None:
        spec = {a.name: a for a in (READ, BRIEF)}[decision.action]
        assert not list(Draft202012Validator(spec.input_schema).iter_errors(decision.args))


def _accepts_step_plan(text: str) -> None:
    parsed = parse_step_plan(text, {"read_material", "create_brief"})
    assert not isinstance(parsed, SignalFailure), parsed


def _accepts_content(text: str) -> None:
    args = json.loads(text)
    assert isinstance(args, dict) and not list(Draft202012Validator(BRIEF.input_schema).iter_errors(args))


# Contract -> the Runtime's parser for its reply (raises, or fails an assertion, when it refuses it).
PARSERS: dict[ReplyContract, Callable[[str], Any]] = {
    ReplyContract.DECISION: _accepts_decision,
    ReplyContract.STEP_PLAN: _accepts_step_plan,
    ReplyContract.PLAN_DOCUMENT: load_plan,
    ReplyContract.PLAN_PATCH: load_patch,
    ReplyContract.NODE_CONTENT: _accepts_content,
    ReplyContract.CHECK_JUDGEMENT: ModelJudgement.model_validate_json,
}


def accepted_examples(contract: ReplyContract) -> list[Any]:
    """Documents the Runtime accepts, in the canonical form a strict schema asks for (defaults written out)."""
    plan = load_plan(PAYMENT_PLAN.read_bytes())
    if contract is ReplyContract.PLAN_DOCUMENT:
        return [plan.model_dump(mode="json")]
    if contract is ReplyContract.PLAN_PATCH:
        patch = PlanPatch(
            base_version=1,
            reason=ReplanReason.FACTS_CHANGED,
            evidence_ids=("ev-1",),
            summary="a repository is unreadable",
            changed_items=(plan.work_items[3],),
            added_items=(plan.work_items[4].model_copy(update={"work_item_id": "W99"}),),
            removed_items=("W05",),
            kept_completed=("W01",),
        )
        return [patch.model_dump(mode="json")]
    if contract is ReplyContract.CHECK_JUDGEMENT:
        return [{"verdict": v, "detail": "the cited evidence says so"} for v in ("PASS", "FAIL", "UNKNOWN")]
    if contract is ReplyContract.NODE_CONTENT:
        return [{"title": "Retry storms", "outline": ["why", "how"], "words": 300}]
    if contract is ReplyContract.STEP_PLAN:
        steps = [
            {"kind": "tool", "action": "read_material", "args": {"material_id": "m1"}},
            {"kind": "await_approval", "question": "publish?"},
            {"kind": "finish", "reason": "done"},
        ]
        return [{"steps": steps}]
    return [
        {"type": "EXECUTE_TOOL", "action": "read_material", "args": {"material_id": "m2"}},
        {"type": "REQUEST_USER_INPUT", "question": "which one?"},
        {"type": "FINISH", "reason": "met"},
        {"type": "FAIL", "reason": "cannot"},
    ]


def instances(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Any document ``schema`` admits (for the keywords the sent schemas use), drawn by hypothesis."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([instances(s) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return st.fixed_dictionaries({k: instances(v) for k, v in props.items()})
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(instances(schema.get("items", {})), min_size=low, max_size=max(low, min(3, schema["maxItems"])))
    if kind == "string":
        low = schema.get("minLength", 0)
        return st.text(min_size=low, max_size=max(low, min(schema["maxLength"], 12)))
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return st.integers(min_value=low, max_value=schema.get("maximum", low + 1000))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise AssertionError(f"the sent schema uses a form this strategy does not know: {schema}")


@pytest.mark.parametrize("contract", list(ReplyContract))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_document_the_sent_schema_admits_is_accepted_by_the_runtime(
    contract: ReplyContract, data: st.DataObject
) -> None:
    _, schema = contracts.response_schema(request_for(contract))
    doc = data.draw(instances(schema))
    assert not list(Draft202012Validator(schema).iter_errors(doc))  # the strategy draws only valid ones
    PARSERS[contract](json.dumps(doc))


@pytest.mark.parametrize("contract", list(ReplyContract))
def test_documents_the_runtime_accepts_validate_under_the_sent_schema(contract: ReplyContract) -> None:
    _, schema = contracts.response_schema(request_for(contract))
    Draft202012Validator.check_schema(schema)
    for doc in accepted_examples(contract):
        PARSERS[contract](json.dumps(doc))
        errors = [f"{list(e.path)}: {e.message}" for e in Draft202012Validator(schema).iter_errors(doc)]
        assert not errors, errors[:3]


DOCUMENTS = (ReplyContract.PLAN_DOCUMENT, ReplyContract.PLAN_PATCH, ReplyContract.CHECK_JUDGEMENT)


@pytest.mark.parametrize("contract", list(ReplyContract))
def test_sent_schemas_are_strict_closed_required_and_bounded(contract: ReplyContract) -> None:
    """Documents are sent closed with every property required; an action's own arguments keep the agent's
    schema (its optional arguments stay optional), bounded like everything else."""
    _, schema = contracts.response_schema(request_for(contract))
    strict = contract in DOCUMENTS

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                walk(v)
            return
        if not isinstance(node, dict):
            return
        assert "$ref" not in node
        if strict and node.get("type") == "object" and "properties" in node:
            assert node["additionalProperties"] is False and set(node["required"]) == set(node["properties"])
        if node.get("type") == "string" and "enum" not in node and "const" not in node:
            assert "maxLength" in node
        if node.get("type") == "array":
            assert "maxItems" in node
        if strict and node.get("type") == "integer":
            assert "maximum" in node
        for key, value in node.items():
            if key == "properties":
                walk(list(value.values()))
            else:
                walk(value)

    walk(schema)


def test_the_plan_run_planner_is_not_sent_the_step_plan_schema() -> None:
    """The payment case's accepted plan does not fit the step plan's schema: the two plans are not one."""
    plan = accepted_examples(ReplyContract.PLAN_DOCUMENT)[0]
    _, step_plan = contracts.response_schema(request_for(ReplyContract.STEP_PLAN))
    _, document = contracts.response_schema(request_for(ReplyContract.PLAN_DOCUMENT))
    assert list(Draft202012Validator(step_plan).iter_errors(plan))
    assert not list(Draft202012Validator(document).iter_errors(plan))


def test_a_document_contract_without_its_schema_is_a_named_error() -> None:
    request = ModelRequest(purpose="replan", goal="g")
    assert request.reply_contract is ReplyContract.PLAN_PATCH  # the purpose's default
    with pytest.raises(UserError) as caught:
        contracts.response_schema(request)
    assert caught.value.code is ErrorCode.UNSUPPORTED_SCHEMA


def test_a_required_free_form_object_cannot_be_made_strict() -> None:
    schema = {"type": "object", "properties": {"blob": {"type": "object"}}, "required": ["blob"]}
    with pytest.raises(UserError) as caught:
        contracts.strict_schema(schema)
    assert caught.value.code is ErrorCode.UNSUPPORTED_SCHEMA


def test_an_output_schema_in_a_plan_is_sent_as_null_only() -> None:
    """A plan output's own JSON Schema is free-form: the strict form lets the model leave it null, and the
    Runtime reads a null exactly as an absent one."""
    _, schema = contracts.response_schema(request_for(ReplyContract.PLAN_DOCUMENT))
    spec = schema["properties"]["work_items"]["items"]["properties"]["output_spec"]
    assert spec["properties"]["schema"] == {"type": "null"}
    item = load_plan(PAYMENT_PLAN.read_bytes()).work_items[0]
    assert Plan.model_fields["work_items"] and item.output_spec.json_schema is None
