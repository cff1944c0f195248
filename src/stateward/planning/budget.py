"""Multi-dimensional budget ledger: reserve before work starts, settle after, never reset.

A work item estimated at 8 tool calls must not start when 2 are left, so work first *reserves* its
estimate; the reservation counts against every limit until it is settled (moved to ``used`` with the
actual amount, which may be above or below the estimate) or released. The ledger is an immutable value
stored with the run, so a resume continues from what was spent: :meth:`BudgetLedger.restore_from`
refuses any snapshot that would lower ``used`` (``BUDGET_RESET_REFUSED``).

Dimensions follow the reference budget document (``max_tool_calls``, ``max_model_calls``, ``max_tokens``,
``max_elapsed_seconds``, ``max_total_attempts``, ``max_replans``, ``max_reflections_per_artifact``) plus
``max_cost`` for runs where a price is known. ``None`` means "not limited".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from stateward.core.errors import ErrorCode, RunError
from stateward.planning.plan import EstimatedCost, RemainingBudget


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Dimensions that add up across the run (reflections are counted per artifact instead).
DIMENSIONS: tuple[str, ...] = (
    "tool_calls",
    "model_calls",
    "tokens",
    "elapsed_seconds",
    "attempts",
    "replans",
    "cost",
)


class BudgetError(RunError):
    """A budget rule refused a change; the ledger is unchanged.

    Codes: BUDGET_EXCEEDED (a reservation or reflection does not fit), BUDGET_RESET_REFUSED (a restore
    would lower what was spent), RESERVATION_EXISTS, UNKNOWN_RESERVATION.
    """

    default_code = ErrorCode.BUDGET_EXCEEDED


class BudgetAmount(_Frozen):
    """An amount in every dimension: what was used, reserved, estimated or actually spent.

    ``cost`` is counted only where a price is known; unknown cost is 0, never a guess.
    """

    tool_calls: NonNegativeInt = 0
    model_calls: NonNegativeInt = 0
    tokens: NonNegativeInt = 0
    elapsed_seconds: NonNegativeFloat = 0.0
    attempts: NonNegativeInt = 0
    replans: NonNegativeInt = 0
    cost: NonNegativeFloat = 0.0

    def __add__(self, other: BudgetAmount) -> BudgetAmount:
        return BudgetAmount(**{d: getattr(self, d) + getattr(other, d) for d in DIMENSIONS})

    def __sub__(self, other: BudgetAmount) -> BudgetAmount:
        """Difference floored at 0 (an amount is never negative)."""
        return BudgetAmount(**{d: max(getattr(self, d) - getattr(other, d), 0) for d in DIMENSIONS})

    @classmethod
    def from_estimate(cls, cost: EstimatedCost, *, attempts: int = 1) -> BudgetAmount:
        """A plan work item's estimate as a reservation; starting it is one attempt."""
        return cls(tool_calls=cost.tool_calls, model_calls=cost.model_calls, tokens=cost.tokens, attempts=attempts)


class BudgetLimits(_Frozen):
    """Upper bounds; field names match the reference budget document so it loads as is."""

    max_tool_calls: NonNegativeInt | None = None
    max_model_calls: NonNegativeInt | None = None
    max_tokens: NonNegativeInt | None = None
    max_elapsed_seconds: NonNegativeFloat | None = None
    max_total_attempts: NonNegativeInt | None = None
    max_replans: NonNegativeInt | None = None
    max_reflections_per_artifact: NonNegativeInt | None = None
    max_cost: NonNegativeFloat | None = None

    def limit(self, dimension: str) -> float | None:
        """The limit of one budget dimension by its name, or None when it is unlimited."""
        name = "max_total_attempts" if dimension == "attempts" else f"max_{dimension}"
        value: float | None = getattr(self, name)
        return value


class BudgetRemaining(_Frozen):
    """What is left after used and reserved amounts; ``None`` means that dimension is not limited."""

    tool_calls: int | None = None
    model_calls: int | None = None
    tokens: int | None = None
    elapsed_seconds: float | None = None
    attempts: int | None = None
    replans: int | None = None
    cost: float | None = None

    def covers(self, need: BudgetAmount) -> bool:
        """True if ``need`` fits in every limited dimension."""
        return not self.shortfalls(need)

    def shortfalls(self, need: BudgetAmount) -> list[dict[str, Any]]:
        """The dimensions in which ``need`` exceeds what is left, with both amounts."""
        out: list[dict[str, Any]] = []
        for d in DIMENSIONS:
            left: float | None = getattr(self, d)
            needed: float = getattr(need, d)
            if left is not None and needed > left:
                out.append({"dimension": d, "needed": needed, "available": left})
        return out

    def to_plan_budget(self) -> RemainingBudget:
        """The subset :func:`stateward.planning.derive_states` uses to block items that do not fit."""
        return RemainingBudget(tool_calls=self.tool_calls, model_calls=self.model_calls, tokens=self.tokens)


class BudgetLedger(_Frozen):
    """Limits, what was spent and what is reserved, per run. Every change returns a new ledger.

    ``resets`` counts refused attempts to lower ``used`` that the runtime recorded via
    :meth:`with_refused_reset`; it is a safety metric that must stay 0 and can never decrease.
    """

    limits: BudgetLimits = BudgetLimits()
    used: BudgetAmount = BudgetAmount()
    reserved: dict[str, BudgetAmount] = Field(default_factory=dict)
    reflections: dict[str, NonNegativeInt] = Field(default_factory=dict)  # per artifact name
    resets: NonNegativeInt = 0

    # ----------------------------------------------------------------- reading

    def total_reserved(self) -> BudgetAmount:
        """The sum of every open reservation, counted against what is left before it is spent."""
        total = BudgetAmount()
        for amount in self.reserved.values():
            total = total + amount
        return total

    def committed(self) -> BudgetAmount:
        """Used plus reserved: what a new reservation has to fit beside."""
        return self.used + self.total_reserved()

    def remaining(self) -> BudgetRemaining:
        """What is left in each dimension after committed spending; None where there is no limit."""
        committed = self.committed()
        values: dict[str, float | None] = {}
        for d in DIMENSIONS:
            limit = self.limits.limit(d)
            values[d] = None if limit is None else max(limit - getattr(committed, d), 0)
        return BudgetRemaining.model_validate(values)

    def exhausted(self) -> list[str]:
        """Dimensions whose actual use reached the limit (reservations of running work do not count here)."""
        return [d for d in DIMENSIONS if (lim := self.limits.limit(d)) is not None and getattr(self.used, d) >= lim]

    def overrun(self) -> list[str]:
        """Dimensions where actual use went past the limit (settled actuals above the estimate)."""
        return [d for d in DIMENSIONS if (lim := self.limits.limit(d)) is not None and getattr(self.used, d) > lim]

    def reflections_left(self, artifact: str) -> int | None:
        """How many more reflection rounds ``artifact`` may have; None where there is no limit."""
        limit = self.limits.max_reflections_per_artifact
        return None if limit is None else max(limit - self.reflections.get(artifact, 0), 0)

    # ----------------------------------------------------------------- changing (new ledger each time)

    def reserve(self, item_id: str, estimate: BudgetAmount) -> BudgetLedger:
        """Reserve ``estimate`` for ``item_id`` or raise BUDGET_EXCEEDED if it does not fit every limit."""
        if item_id in self.reserved:
            raise BudgetError(
                f"{item_id} already holds a reservation",
                code=ErrorCode.RESERVATION_EXISTS,
                details={"item_id": item_id},
            )
        shortfalls = self.remaining().shortfalls(estimate)
        if shortfalls:
            dims = ", ".join(f"{s['dimension']} needs {s['needed']}, {s['available']} left" for s in shortfalls)
            raise BudgetError(
                f"{item_id} does not fit the budget: {dims}",
                details={"item_id": item_id, "shortfalls": shortfalls},
            )
        return self.model_copy(update={"reserved": {**self.reserved, item_id: estimate}})

    def settle(self, item_id: str, actual: BudgetAmount) -> BudgetLedger:
        """Move ``item_id``'s reservation to used at the ``actual`` amount (facts are recorded even over a limit)."""
        if item_id not in self.reserved:
            raise BudgetError(
                f"no reservation for {item_id}", code=ErrorCode.UNKNOWN_RESERVATION, details={"item_id": item_id}
            )
        rest = {k: v for k, v in self.reserved.items() if k != item_id}
        return self.model_copy(update={"reserved": rest, "used": self.used + actual})

    def release(self, item_id: str) -> BudgetLedger:
        """Drop a reservation that will not be spent (the item never started)."""
        if item_id not in self.reserved:
            raise BudgetError(
                f"no reservation for {item_id}", code=ErrorCode.UNKNOWN_RESERVATION, details={"item_id": item_id}
            )
        return self.model_copy(update={"reserved": {k: v for k, v in self.reserved.items() if k != item_id}})

    def charge(self, actual: BudgetAmount) -> BudgetLedger:
        """Record spending that had no reservation (e.g. the controller's own model call)."""
        return self.model_copy(update={"used": self.used + actual})

    def record_reflection(self, artifact: str) -> BudgetLedger:
        """Count one repair of ``artifact``; raises BUDGET_EXCEEDED past ``max_reflections_per_artifact``."""
        left = self.reflections_left(artifact)
        if left is not None and left <= 0:
            raise BudgetError(
                f"no reflections left for {artifact}",
                details={"artifact": artifact, "limit": self.limits.max_reflections_per_artifact},
            )
        return self.model_copy(
            update={"reflections": {**self.reflections, artifact: self.reflections.get(artifact, 0) + 1}}
        )

    def granted(self, extra: BudgetAmount) -> BudgetLedger:
        """A person granted ``extra``: each limited dimension's limit rises by it, what was spent stays (never a
        reset). Granting in a dimension that has no limit is refused (BUDGET_GRANT_REFUSED): it would mean
        nothing, and saying so is better than recording a grant that changed nothing."""
        update: dict[str, float] = {}
        for d in DIMENSIONS:
            amount = getattr(extra, d)
            if not amount:
                continue
            limit = self.limits.limit(d)
            if limit is None:
                raise BudgetError(f"{d} has no limit to raise", code=ErrorCode.BUDGET_GRANT_REFUSED)
            name = "max_total_attempts" if d == "attempts" else f"max_{d}"
            update[name] = type(limit)(limit + amount)
        return self.raise_limits(self.limits.model_copy(update=update))

    def raise_limits(self, limits: BudgetLimits) -> BudgetLedger:
        """A person granted more budget: only limits change, what was spent stays (this is not a reset)."""
        return self.model_copy(update={"limits": limits})

    def with_refused_reset(self) -> BudgetLedger:
        """Record that something tried to lower ``used`` (the caller caught BUDGET_RESET_REFUSED)."""
        return self.model_copy(update={"resets": self.resets + 1})

    def restore_from(self, snapshot: BudgetLedger) -> BudgetLedger:
        """Take ``snapshot`` (e.g. the stored ledger on resume) unless it would lower anything spent.

        Refused with BUDGET_RESET_REFUSED when the snapshot's ``used`` is below this ledger's in any
        dimension, has fewer reflections for any artifact, or a lower ``resets`` count.
        """
        lowered = [d for d in DIMENSIONS if getattr(snapshot.used, d) < getattr(self.used, d)]
        lowered += [
            f"reflections[{a}]" for a, n in sorted(self.reflections.items()) if snapshot.reflections.get(a, 0) < n
        ]
        if snapshot.resets < self.resets:
            lowered.append("resets")
        if lowered:
            raise BudgetError(
                f"restoring would lower spent budget in: {', '.join(lowered)}",
                code=ErrorCode.BUDGET_RESET_REFUSED,
                details={"dimensions": lowered},
            )
        return snapshot
