"""The deliverable's model checks, charged to the run like every other model call.

A semantic check is a model call: it spends a call and tokens, so it is reserved against what the budget
has left and charged once made. :class:`MeteredModel` is the view of the configured checker a verifier is
handed: a call the budget left cannot carry (no model call left, or a request bigger than the tokens left)
is not made - the check is then UNKNOWN, which never passes - and every call made is kept so the controller
charges it to the item's attempt and reports it to the Runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stateward.controllers.plan_run import facts as view
from stateward.controllers.plan_run.memo import PlanRunMemo, tokens_of
from stateward.controllers.plan_run.services import Services
from stateward.core.errors import ErrorCode
from stateward.models.base import AnyModel, ModelReply, ModelRequest, Usage
from stateward.models.base import _complete as complete_uncounted  # the outer complete() already reports the call
from stateward.planning.budget import BudgetError, BudgetRemaining
from stateward.planning.plan import WorkItem


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


def metered_checker(svc: Services, memo: PlanRunMemo) -> MeteredModel | None:
    """The configured checker, allowed only what the budget has left (running attempts settled as spent)."""
    if svc.config.checker is None:
        return None
    return MeteredModel.within(svc.config.checker, view.live_ledger(memo).remaining())


def charge_checks(memo: PlanRunMemo, item: WorkItem, checker: MeteredModel, charged: list[Usage]) -> None:
    """A check's model calls are the item's, like its worker's: counted on its attempt and reported with
    the step (``charged``)."""
    run = memo.items[item.work_item_id]
    run.model_calls += len(checker.usages)
    run.tokens += sum(tokens_of(u) for u in checker.usages)
    charged.extend(checker.usages)
