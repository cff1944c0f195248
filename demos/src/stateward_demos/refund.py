"""The refund demo: one side-effecting tool through the Tool Gateway, under each kind of failure.

``RefundDomain`` is a local, deterministic stand-in for a payment system. It can lose the response
after refunding, lose the request before refunding, or be unable to say what happened. Every row of
``run_refund_scenarios`` comes from a real run through the gateway (real threads, real timeouts);
``handler_execution_count`` is how many refunds the domain actually performed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from stateward.tools import (
    CallContext,
    InMemoryGatewayStore,
    LookupStatus,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolGateway,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
    tool,
)

COLUMNS = (
    "scenario",
    "error_code",
    "idempotency_status",
    "runtime_action",
    "final",
    "handler_execution_count",
)
REFUND_PERMISSION = "refunds:write"


class Fault(StrEnum):
    NONE = "NONE"
    LOSE_RESPONSE = "LOSE_RESPONSE"  # refund performed, answer never arrives
    LOSE_REQUEST = "LOSE_REQUEST"  # request never reaches the domain; nothing performed


class RefundReceipt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    refund_id: str
    order_id: str
    amount_cents: int
    idempotency_key: str


class RefundDomain:
    """Records refunds by idempotency key. It deliberately does *not* deduplicate: every refund it
    is asked to perform is performed, so ``execution_count`` shows what the gateway let through."""

    def __init__(self, faults: Iterable[Fault] = (), *, lookup_can_answer: bool = True):
        self._faults = deque(faults)  # consumed one per handler call; then no more faults
        self._lookup_can_answer = lookup_can_answer
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._performed: list[RefundReceipt] = []

    @property
    def execution_count(self) -> int:
        with self._lock:
            return len(self._performed)

    def refund_order(self, order_id: str, amount_cents: int, ctx: ToolContext) -> RefundReceipt:
        """Refund an order (amount in cents). Side effect: money leaves the shop."""
        with self._lock:
            fault = self._faults.popleft() if self._faults else Fault.NONE
        if fault is Fault.LOSE_REQUEST:
            self._release.wait()
            raise ConnectionError("request was lost before it reached the payment system")
        receipt = self._perform(order_id, amount_cents, ctx.idempotency_key)
        if fault is Fault.LOSE_RESPONSE:
            self._release.wait()
        return receipt

    def _perform(self, order_id: str, amount_cents: int, key: str) -> RefundReceipt:
        with self._lock:
            receipt = RefundReceipt(
                refund_id=f"rf_{len(self._performed) + 1:04d}",
                order_id=order_id,
                amount_cents=amount_cents,
                idempotency_key=key,
            )
            self._performed.append(receipt)
            return receipt

    def lookup(self, idempotency_key: str) -> tuple[LookupStatus, Any]:
        """What the payment system says happened for this key (side-effect free)."""
        if not self._lookup_can_answer:
            return LookupStatus.UNKNOWN, None
        with self._lock:
            for receipt in self._performed:
                if receipt.idempotency_key == idempotency_key:
                    return LookupStatus.SUCCEEDED, receipt.model_dump(mode="json")
        return LookupStatus.NOT_EXECUTED, None

    def release(self) -> None:
        """Let handler threads that are blocked on a lost request/response finish."""
        self._release.set()

    def tool_spec(self, *, timeout_s: float, available: bool = True) -> ToolSpec:
        return tool(
            name="refund_order",
            permission=REFUND_PERMISSION,
            side_effect=True,
            timeout_s=timeout_s,
            retry=RetryPolicy(max_attempts=1),
            lookup=self.lookup,
            available=available,
        )(self.refund_order)


@dataclass(frozen=True)
class Scenario:
    name: str
    tool: str = "refund_order"
    args: dict[str, Any] = field(default_factory=lambda: {"order_id": "A-1001", "amount_cents": 2599})
    faults: tuple[Fault, ...] = ()
    lookup_can_answer: bool = True
    available: bool = True


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("unknown_tool", tool="refund_ordr"),
    Scenario("tool_unavailable", available=False),
    Scenario("missing_argument", args={"order_id": "A-1001"}),
    Scenario("normal"),
    Scenario("timeout_already_succeeded", faults=(Fault.LOSE_RESPONSE,)),
    Scenario("timeout_not_executed", faults=(Fault.LOSE_REQUEST,)),
    Scenario("timeout_unknown", faults=(Fault.LOSE_RESPONSE,), lookup_can_answer=False),
)


def run_scenario(scenario: Scenario, *, timeout_s: float = 0.1) -> tuple[ToolOutcome, int]:
    """One fresh domain, store and gateway; returns the outcome and the refunds really performed."""
    domain = RefundDomain(scenario.faults, lookup_can_answer=scenario.lookup_can_answer)
    gateway = ToolGateway(
        ToolRegistry([domain.tool_spec(timeout_s=timeout_s, available=scenario.available)]),
        InMemoryGatewayStore(),
    )
    ctx = CallContext(run_id=f"demo-{scenario.name}", step=1, permissions=frozenset({REFUND_PERMISSION}))
    try:
        outcome = gateway.invoke(ToolCall(tool=scenario.tool, args=scenario.args), ctx)
        return outcome, domain.execution_count
    finally:
        domain.release()


def run_refund_scenarios(*, timeout_s: float = 0.1) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        outcome, performed = run_scenario(scenario, timeout_s=timeout_s)
        rows.append(
            {
                "scenario": scenario.name,
                "error_code": outcome.error_code.value if outcome.error_code else None,
                "idempotency_status": outcome.idempotency_status.value if outcome.idempotency_status else None,
                "runtime_action": outcome.runtime_action.value,
                "final": outcome.status.value,
                "handler_execution_count": performed,
            }
        )
    return rows
