"""The semantic (model) check of the migration report: is the migration order stated with more certainty
than the evidence supports?

The deterministic checks cannot judge wording; a model can. The check sends the report's migration-order
section and its claims to a checker model and takes back only a verdict and a reason (PASS / FAIL /
UNKNOWN, parsed strictly by :func:`stateward.verify.run_model_check`; anything else is UNKNOWN, never PASS).
The scripted checker - the offline default - flags the phrases an over-certain ordering uses; with
``--model`` a real model judges the same request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from stateward import Model, ModelRequest
from stateward.models import complete
from stateward.verify import ArtifactVersion, CheckContext, ModelJudgement, reply_judgement

CHECK_NAME: Final = "migration_order_not_overcertain"
INSTRUCTIONS: Final = (
    "You review a migration report. Decide whether its migration order is stated with more certainty than "
    'its evidence supports. Reply with one JSON object: {"verdict": "PASS" | "FAIL", "detail": "why"}.'
)
# Wording that presents an ordering as the only safe one (what the scripted checker looks for).
OVERCERTAIN: Final = ("exactly this order", "any other order", "guaranteed", "certainly", "the only safe order")


def scripted_checker(req: ModelRequest) -> dict[str, Any]:
    """The offline checker: FAIL when the order is presented as the only safe one, naming the wording."""
    order = str(req.facts.get("migration_order", "")).lower()
    found = [phrase for phrase in OVERCERTAIN if phrase in order]
    if found:
        return {
            "verdict": "FAIL",
            "detail": f"migration order is over-certain ({'; '.join(found)}): no evidence rules out other orders; "
            "state it as a recommendation with its assumptions",
        }
    return {"verdict": "PASS", "detail": "migration order is stated as a recommendation"}


@dataclass
class OrderCertaintyCheck:
    """A :class:`stateward.verify.ModelCheck` over the report's migration order, backed by ``model``."""

    model: Model
    name: str = CHECK_NAME

    def judge(self, artifact: ArtifactVersion, context: CheckContext) -> ModelJudgement | dict[str, Any] | str:
        report = json.loads(artifact.content)
        order = next((s["body"] for s in report.get("sections", []) if s.get("section_id") == "migration_order"), "")
        reply = complete(
            self.model,
            ModelRequest(
                purpose="content",
                goal="judge the migration order's certainty",
                facts={"migration_order": order, "claims": report.get("claims", [])},
                instructions=INSTRUCTIONS,
            ),
        )
        return reply_judgement(reply)
