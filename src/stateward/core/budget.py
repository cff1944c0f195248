"""Budgets: limits a run may not exceed, and the usage counted against them across processes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from stateward.core.model_io import Usage as ModelUsage


class Budget(BaseModel):
    """Upper bounds for one run. ``None`` means unbounded in that dimension."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int | None = 50
    max_model_calls: int | None = None
    max_tool_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None

    def exhausted_by(self, usage: Usage) -> str | None:
        """The first dimension ``usage`` has used up, or None."""
        limits = (
            ("steps", self.max_steps, usage.steps),
            ("model_calls", self.max_model_calls, usage.model_calls),
            ("tool_calls", self.max_tool_calls, usage.tool_attempts),
            ("input_tokens", self.max_input_tokens, usage.input_tokens),
            ("output_tokens", self.max_output_tokens, usage.output_tokens),
        )
        for name, limit, used in limits:
            if limit is not None and used >= limit:
                return name
        return None


# The budget's dimensions: a bound of Budget and the Usage counter it holds.
BOUNDED = (
    ("max_steps", "steps"),
    ("max_model_calls", "model_calls"),
    ("max_tool_calls", "tool_attempts"),
    ("max_input_tokens", "input_tokens"),
    ("max_output_tokens", "output_tokens"),
)


def carve(limits: Budget, usage: Usage, *caps: Budget | None) -> Budget:
    """A child's budget, carved from what ``limits`` leave after ``usage``: in each dimension at most what
    remains (never less than 0), and at most each of ``caps`` (what the caller declared, what the call asked).
    A dimension the parent leaves unbounded is bounded only by the caps."""
    bounds: dict[str, int | None] = {}
    for bound, counter in BOUNDED:
        limit = getattr(limits, bound)
        held = [max(0, limit - getattr(usage, counter))] if limit is not None else []
        held += [max(0, value) for cap in caps if cap is not None and (value := getattr(cap, bound)) is not None]
        bounds[bound] = min(held) if held else None
    return Budget(**bounds)


def split(budget: Budget, ways: int) -> Budget:
    """One of ``ways`` equal shares of ``budget`` in each dimension (rounded down, so the shares never add up
    to more than the whole); an unbounded dimension stays unbounded."""
    shares = {bound: None if (v := getattr(budget, bound)) is None else v // max(1, ways) for bound, _ in BOUNDED}
    return Budget(**shares)


def spent(usage: Usage) -> UsageDelta:
    """A run's spend in the budget's dimensions, as a delta: what a child's end adds to its parent's usage."""
    return UsageDelta(**{counter: getattr(usage, counter) for _, counter in BOUNDED})


class Usage(BaseModel):
    """What a run has consumed and how it was refused. Carried in every snapshot; never reset."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = 0
    model_calls: int = 0
    tool_attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    rejected_signals: int = 0
    rejected_actions: int = 0
    illegal_transitions: int = 0
    approvals_consumed: int = 0
    scope_violations: int = 0  # calls the gateway refused for naming a resource outside the goal's scope

    def plus(self, delta: UsageDelta) -> Usage:
        """The usage after ``delta``: the one place a run's counters advance (they never go back)."""
        counts = delta.counts()
        return self.model_copy(update={k: getattr(self, k) + v for k, v in counts.items()}) if counts else self


class UsageDelta:
    """What one write adds to a run's usage, by counter (``UsageDelta(steps=1, model_calls=2)``). Every write
    carries its own (see ``runtime/write.py``'s ``Write``), so what a step spent is data that can be read and
    tested, not arithmetic spread over callers. The counters are ``Usage``'s fields, named once there; a plain
    value (built several times per step, never stored)."""

    __slots__ = ("_counts",)

    def __init__(self, **counts: int) -> None:
        unknown = sorted(set(counts) - set(Usage.model_fields))
        if unknown:
            raise TypeError(f"not usage counters: {unknown}")
        self._counts = {name: n for name, n in counts.items() if n}

    @classmethod
    def of_model_calls(cls, calls: Sequence[ModelUsage], **more: int) -> UsageDelta:
        """The model calls a step made (one each) and their tokens, with ``more`` counters besides."""
        return cls(
            model_calls=len(calls),
            input_tokens=sum(c.input_tokens for c in calls),
            output_tokens=sum(c.output_tokens for c in calls),
            **more,
        )

    def counts(self) -> dict[str, int]:
        """The counters this delta advances, by name (those it leaves alone omitted)."""
        return dict(self._counts)

    def __add__(self, other: UsageDelta) -> UsageDelta:
        """Both deltas together (a decision's and the tool call it made)."""
        both = dict(self._counts)
        for name, n in other._counts.items():
            both[name] = both.get(name, 0) + n
        return UsageDelta(**both)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UsageDelta) and self._counts == other._counts

    __hash__ = None  # type: ignore[assignment]  # equal by value, like the counts it holds

    def __repr__(self) -> str:
        return f"UsageDelta({', '.join(f'{k}={v}' for k, v in self._counts.items())})"
