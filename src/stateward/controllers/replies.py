"""The documents controllers ask a model for that are defined above the models layer, each with the
pydantic model the Runtime parses the reply with.

A request for one of them carries its contract and that model's JSON schema
(:func:`document_request`); the providers send the schema in the strict form of
:mod:`stateward.models.contracts`, so a constrained server can only answer with a document the
parser below accepts. One table, so a document and its schema cannot drift apart.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from stateward.core.model_io import ModelRequest, ReplyContract
from stateward.planning.patch import PlanPatch
from stateward.planning.plan import Plan
from stateward.verify.checks import ModelJudgement

# Contract -> the model its reply is parsed with (load_plan, load_patch, run_model_check).
DOCUMENT_MODELS: dict[ReplyContract, type[BaseModel]] = {
    ReplyContract.PLAN_DOCUMENT: Plan,
    ReplyContract.PLAN_PATCH: PlanPatch,
    ReplyContract.CHECK_JUDGEMENT: ModelJudgement,
}


@cache
def _schema(contract: ReplyContract) -> dict[str, Any]:
    return DOCUMENT_MODELS[contract].model_json_schema(by_alias=True)


def document_schema(contract: ReplyContract) -> dict[str, Any]:
    """The JSON schema of ``contract``'s document, as pydantic derives it from the parsing model."""
    return dict(_schema(contract))


def document_request(contract: ReplyContract, **fields: Any) -> ModelRequest:
    """A request for ``contract``'s document, carrying its schema for the provider to send."""
    return ModelRequest(contract=contract, reply_schema=document_schema(contract), **fields)
