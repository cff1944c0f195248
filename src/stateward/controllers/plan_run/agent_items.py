"""Plan items of type AGENT: the item's work is done by another agent, as a call of its agent tool.

An AGENT item names the agent tool in its ``required_capabilities``; it runs as code (no model decides
anything), and its default procedure is two calls: the agent tool on the item's title (the call starts the
child run through the one path every agent tool's call takes: the gateway, its idempotency key, the carve,
the durable wait, the cascade), then ``record_output`` with what the child delivered. A child that failed,
was cancelled or could not start ends the item's attempt by name; its retry policy decides what follows.
A procedure registered for the item's artifact type replaces the default, as for any code-run item.
"""

from __future__ import annotations

import json
from typing import Any

from stateward.controllers.plan_support import OUTPUT_TOOL, cite_evidence
from stateward.core.contract import Observation, OutcomeStatus
from stateward.core.decision import ControlDecision, DecisionType
from stateward.models.base import ModelRequest
from stateward.planning.budget import BudgetAmount

__all__ = ["agent_procedure", "child_spend"]


def agent_procedure(request: ModelRequest) -> ControlDecision:
    """An AGENT item's next call: its agent tool's call on the item's title, then the child's outcome recorded
    as the item's output. Raises ValueError (the item's attempt fails with PROCEDURE_FAILED, saying why) when
    the item names no agent tool, or its child did not deliver."""
    item: dict[str, Any] = request.facts["work_item"]
    tools = [spec.name for spec in request.visible_actions if spec.name != OUTPUT_TOOL]
    if not tools:
        raise ValueError(f"AGENT item {item['work_item_id']} names no agent tool in its required_capabilities")
    tool = tools[0]
    calls = [o for o in request.observations if o.get("action") == tool]
    if not calls:
        return ControlDecision(type=DecisionType.EXECUTE_TOOL, action=tool, args={"goal": item["title"]})
    last = calls[-1]
    found = last.get("result")
    result: dict[str, Any] = found if isinstance(found, dict) else {}
    if last.get("status") != OutcomeStatus.SUCCESS:
        raise ValueError(f"the child run of {tool} did not deliver: {last.get('error_code')}")
    if "child_run_id" not in result:
        raise ValueError(f"{tool} is not an agent tool (agent_tool): its call started no child run")
    content = {key: result.get(key) for key in ("child_run_id", "agent", "status", "partial", "answer", "facts")}
    args = {
        "artifact_type": item["output_spec"]["artifact_type"],
        "content": json.dumps(content, sort_keys=True),
        "evidence": cite_evidence(request),
    }
    return ControlDecision(type=DecisionType.EXECUTE_TOOL, action=OUTPUT_TOOL, args=args)


def child_spend(observation: Observation) -> BudgetAmount | None:
    """What a child run spent, from the observation its end made (None for any other observation): charged
    to the plan's ledger, so a plan's limits hold its items' children too, whoever made the call."""
    result = observation.result
    started = isinstance(result, dict) and ("child_run_id" in result or "child_run_ids" in result)
    if not started or not isinstance(result, dict) or not isinstance(result.get("usage"), dict):
        return None
    usage: dict[str, Any] = result["usage"]
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    return BudgetAmount(
        tool_calls=int(usage.get("tool_attempts", 0)), model_calls=int(usage.get("model_calls", 0)), tokens=tokens
    )
