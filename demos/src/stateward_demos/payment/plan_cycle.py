"""The payment case under one more of the source's faults: the planner's first plan has a dependency cycle.

Kept apart from the payment agent (which stays as it is): the same agent, registered under its own name,
with a planner whose first answer makes W03 depend on W06 (which already depends on W05, which depends
on W03). The plan validator must refuse it - a cyclic plan never runs - and the run goes on with the
planner's next plan, the case's own.
"""

from __future__ import annotations

import json
from typing import Any, Final

from stateward import Agent, AgentRef, ModelRequest
from stateward.models import ScriptedModel
from stateward_demos.payment import agent as payment
from stateward_demos.payment.scripts import planner_policy

NAME: Final = "payment-migration-plan-cycle"
LOOP: Final = ("W03", "W06")  # W03 -> W06 -> W05 -> W03


def cyclic_planner() -> ScriptedModel:
    """The case's planner, except that its first plan loops back on itself."""
    asked = {"plans": 0}

    def policy(req: ModelRequest) -> str:
        text = planner_policy(req)
        if req.purpose != "plan":
            return text
        asked["plans"] += 1
        if asked["plans"] > 1:
            return text
        plan = json.loads(text)
        for item in plan["work_items"]:
            if item["work_item_id"] == LOOP[0]:
                item["dependencies"] = [*item["dependencies"], LOOP[1]]
        return json.dumps(plan)

    return ScriptedModel(policy, name="scripted-planner-cyclic-first")


def build_agent(**params: Any) -> Agent:
    """The payment agent (same JSON parameters) with the cyclic-first planner."""
    agent = payment.build_agent(**params)
    agent.controller.planner = cyclic_planner()  # type: ignore[attr-defined]
    agent.ref = AgentRef(name=NAME, params=agent.agent_ref.params)
    return agent
