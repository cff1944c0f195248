"""The Tool Gateway as the run workflow sees it: the workflow runs ``tool_step.execute_tool`` twice around the
tool activity, once to learn exactly which call and context it would send (``Capture``), once to make the step's
write from the outcome the activity brought back (``Answered``). Nothing runs in either: the call itself is the
activity's, through the real gateway.
"""

from __future__ import annotations

from typing import Any

from stateward.core.canonical import canonical_json, idempotency_key_of
from stateward.tools.gateway import ToolGateway
from stateward.tools.types import CallContext, ToolCall, ToolOutcome


class Asked(Exception):
    """The call ``execute_tool`` would make, caught before anything runs (the activity makes it)."""

    def __init__(self, call: ToolCall, ctx: CallContext):
        super().__init__(call.tool)
        self.call = call
        self.ctx = ctx


class Capture(ToolGateway):
    """A gateway that only learns which call and context ``execute_tool`` sends: exactly those go to the activity."""

    def __init__(self) -> None:  # no registry, no store: nothing runs here
        pass

    def invoke(self, call: ToolCall, ctx: CallContext) -> ToolOutcome:
        """Never answers: raises the call as asked."""
        raise Asked(call, ctx)


class Answered(ToolGateway):
    """The gateway as the workflow sees it: it already answered (in the activity); ``execute_tool`` reads that."""

    def __init__(self, outcome: ToolOutcome):  # no registry, no store: nothing runs here
        self._outcome = outcome

    def invoke(self, call: ToolCall, ctx: CallContext) -> ToolOutcome:
        """The activity's outcome for this call."""
        return self._outcome


def key_of(spec: Any, call: ToolCall, ctx: CallContext) -> str | None:
    """The idempotency key the gateway gives this call (its ``assign_idempotency_key`` stage, same inputs)."""
    try:
        args = spec.canonical_args(spec.validate_args(call.args))
    except Exception:
        return None  # arguments the gateway refuses before any handler runs: nothing can have happened
    return idempotency_key_of(ctx.key_scope or ctx.run_id, ctx.step, spec.name, canonical_json(args))


__all__ = ["Answered", "Asked", "Capture", "key_of"]
