"""The data that crosses the model boundary: what a model is asked (ModelRequest, with the actions it
may propose), what it answers (ModelReply) and what the call cost (Usage).

Plain data in core, because both sides of the Runtime's contract speak it: controllers build requests
and read replies; the Runtime counts usage. The Model protocol itself lives in ``stateward.models``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, PrivateAttr, TypeAdapter, field_serializer


class ActionSpec(BaseModel):
    """An action the model may propose at this step, with its argument schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class ReplyContract(StrEnum):
    """Which document a model is asked to reply with; the provider sends that document's schema (see
    ``stateward.models.contracts``) instead of guessing it from the purpose."""

    DECISION = "decision"  # one ControlDecision (or one native tool call)
    STEP_PLAN = "step_plan"  # PlanAndExecuteController's {"steps": [...]}
    PLAN_DOCUMENT = "plan_document"  # a plan run's Plan: plan_id, version, goal_id, milestones, work_items
    PLAN_PATCH = "plan_patch"  # a plan run's PlanPatch
    NODE_CONTENT = "node_content"  # a workflow model node's arguments for its one tool
    CHECK_JUDGEMENT = "check_judgement"  # a model check's {"verdict", "detail"}


# The contract a request that names none is taken to ask for, by purpose (requests built by hand).
DEFAULT_CONTRACTS: dict[str, ReplyContract] = {
    "decide": ReplyContract.DECISION,
    "plan": ReplyContract.STEP_PLAN,
    "replan": ReplyContract.PLAN_PATCH,
    "content": ReplyContract.NODE_CONTENT,
}


_OBSERVATION_LIST = TypeAdapter(list[dict[str, Any]])


class ObservationView(Sequence[dict[str, Any]]):
    """A read-only view of observations the runtime has validated and serialized already (a run's
    observation log, see ``core.contract.ObservationHistory``): a request carries it by reference,
    never validated or copied again."""

    __slots__ = ()


def _observation_list(value: Any) -> Sequence[dict[str, Any]]:
    # Validated as a list (pydantic's own list validator; a Sequence validator runs in Python); a view
    # of the run's log is passed through as it is.
    if isinstance(value, ObservationView):
        return value
    return _OBSERVATION_LIST.validate_python(value)


Observations = Annotated[
    Sequence[dict[str, Any]], PlainValidator(_observation_list, json_schema_input_type=list[dict[str, Any]])
]


class ModelRequest(BaseModel):
    """What a model sees: the goal, what has been observed, and the actions visible right now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    purpose: str  # "decide" (one ControlDecision), "plan", "replan", "content"
    goal: str
    inventory: list[str] = Field(default_factory=list)
    # A list, or (from ``with_history``) a view of the run's observation log that is not copied per request.
    observations: Observations = Field(default_factory=list)
    visible_actions: list[ActionSpec] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    instructions: str = ""
    # Set by the runtime's corrective-message policy: providers append it as a user message naming the error.
    correction: str | None = None
    # The document the reply must be (None: the purpose's default, see ``reply_contract``).
    contract: ReplyContract | None = None
    # The JSON schema of that document when it is defined above the models layer (a plan document, a plan
    # patch, a check's judgement: the pydantic model the Runtime parses it with). Not part of the dumped
    # request: it follows from ``contract``, and a dumped request's size is what metering counts.
    reply_schema: dict[str, Any] | None = Field(default=None, exclude=True, repr=False)
    # The observations list as attached by ``with_history`` and the length of its JSON: see ``json_chars``.
    _history: _KnownSize | None = PrivateAttr(default=None)

    @property
    def reply_contract(self) -> ReplyContract:
        """The document this request asks for: ``contract``, else the purpose's default (a decision)."""
        return self.contract or DEFAULT_CONTRACTS.get(self.purpose, ReplyContract.DECISION)

    @classmethod
    def with_history(cls, observations: Sequence[dict[str, Any]], json_chars: int, **fields: Any) -> ModelRequest:
        """A request whose observations are already JSON forms, attached as given (a view of the run's log,
        see core.contract.ObservationHistory): validating (copying) the whole history again on every step
        is what made a long run's loop quadratic.

        ``json_chars`` is the total length of the observations' compact JSON, so ``json_chars()`` of the
        request never serializes the history either. The dicts are shared: treat them as read-only.
        """
        if isinstance(observations, ObservationView):
            request = cls(**fields, observations=observations)  # passed by reference, not copied
        else:
            request = cls(**fields).model_copy(update={"observations": observations})
        # Into pydantic's private store directly: ``request._history = ...`` goes through ``__setattr__``'s checks.
        request.__pydantic_private__["_history"] = _KnownSize(observations, json_chars)  # type: ignore[index]
        return request

    @field_serializer("observations")
    def _observations_as_list(self, observations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return observations if isinstance(observations, list) else list(observations)

    def json_chars(self) -> int:
        """``len(self.model_dump_json())``, without serializing a history whose length is already known."""
        known: _KnownSize | None = self.__pydantic_private__["_history"]  # type: ignore[index]  # not via __getattr__
        if known is None or known.observations is not self.observations:  # e.g. replaced by model_copy
            return len(self.model_dump_json())
        rest = len(self.model_dump_json(exclude=_HISTORY))  # without ``,"observations":[...]``
        return rest + _HISTORY_KEY_CHARS + known.chars + max(len(self.observations) - 1, 0)  # and the commas


_HISTORY = {"observations"}
_HISTORY_KEY_CHARS = len(',"observations":[]')  # never the first field, so a comma precedes it


class _KnownSize:
    """A request's cached history size: a cache, not content, so it never makes two requests unequal."""

    __slots__ = ("chars", "observations")

    def __init__(self, observations: Sequence[dict[str, Any]], chars: int):
        self.observations = observations
        self.chars = chars

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, _KnownSize)

    __hash__ = None  # type: ignore[assignment]


class Usage(BaseModel):
    """What one model call cost, as the provider reported it (cost only where a price is configured)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    provider_request_id: str | None = None
    cost_usd: float | None = None


class ModelReply(BaseModel):
    """Raw text as the model produced it; parsing it is the Runtime's job.

    A provider that can already see the reply is not exactly one decision (two native tool calls, a
    thinking-only reply) says so in ``rejection_code``; the Runtime then refuses it by that name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    usage: Usage = Field(default_factory=Usage)
    model: str = "unknown"
    rejection_code: str | None = None
    rejection_message: str | None = None
    # Provider-side facts kept for the record, never parsed: why generation stopped, and any prose the
    # model wrote beside its single native tool call.
    stop_reason: str | None = None
    commentary: str | None = None
