"""The deliverable's model checks, charged to the run like every other model call.

A semantic check is a model call: it spends a call and tokens, so it is reserved against what the budget
has left and charged once made. :class:`MeteredModel` is the view of the configured checker a verifier is
handed: a call the budget left cannot carry (no model call left, or a request bigger than the tokens left)
is not made - the check is then UNKNOWN, which never passes - and every call made is kept so the controller
charges it to the item's attempt and reports it to the Runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stateward.controllers.plan_run.memo import tokens_of
from stateward.core.errors import ErrorCode
from stateward.models.base import AnyModel, ModelReply, ModelRequest, Usage
from stateward.models.base import _complete as complete_uncounted  # the outer complete() already reports the call
from stateward.planning.budget import BudgetError, BudgetRemaining


@dataclass
class MeteredModel:
    """``inner`` allowed at most ``calls_left`` calls and ``tokens_left`` tokens (None: unlimited)."""

    inner: AnyModel
    calls_left: int | None
    tokens_left: int | None
    usages: list[Usage] = field(default_factory=list)
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or str(getattr(self.inner, "name", "checker"))

    @classmethod
    def within(cls, inner: AnyModel, remaining: BudgetRemaining) -> MeteredModel:
        """The checker allowed what the run's budget has left."""
        calls = None if remaining.model_calls is None else int(remaining.model_calls)
        tokens = None if remaining.tokens is None else int(remaining.tokens)
        return cls(inner, calls, tokens)

    @property
    def provider(self) -> str | None:
        return getattr(self.inner, "provider", None)

    def complete(self, request: ModelRequest) -> ModelReply:
        """Call the checker if the budget left carries the call; BUDGET_EXCEEDED (nothing sent) if not."""
        need = request.json_chars() // 4
        if self.calls_left is not None and self.calls_left < 1:
            raise BudgetError("no model call left for the check", code=ErrorCode.BUDGET_EXCEEDED)
        if self.tokens_left is not None and need > self.tokens_left:
            raise BudgetError(
                f"the check needs ~{need} tokens, {self.tokens_left} left", code=ErrorCode.BUDGET_EXCEEDED
            )
        reply = complete_uncounted(self.inner, request)
        self.usages.append(reply.usage)
        if self.calls_left is not None:
            self.calls_left -= 1
        if self.tokens_left is not None:
            self.tokens_left = max(self.tokens_left - tokens_of(reply.usage), 0)
        return reply
