"""Side effects run at most once per idempotency key: write-ahead journal, replay, and UNKNOWN_OUTCOME
reconciliation through the tool's ``lookup``."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stateward.core.canonical import idempotency_key
from stateward.core.state import ApprovalScope, Grant
from stateward.runtime.agent import guard
from stateward.tools import (
    CallContext,
    GatewayStore,
    InMemoryGatewayStore,
    LookupStatus,
    OutcomeStatus,
    RateLimited,
    RetryPolicy,
    RuntimeAction,
    ServiceUnavailable,
    SideEffectRecord,
    SideEffectStatus,
    ToolCall,
    ToolContext,
    ToolErrorCode,
    ToolGateway,
    ToolOutcome,
    ToolRegistry,
    tool,
)

CTX = CallContext(run_id="run-s", step=4)
CALL = ToolCall(tool="ship", args={"item": "book"})
KEY = idempotency_key("run-s", 4, "ship", {"item": "book"})
TIMEOUT_S = 0.05


class Warehouse:
    """Ships items. Faults are consumed one per handler call; ``lookup`` modes: truthful, unknown,
    broken (raises), or none (the tool has no lookup)."""

    def __init__(self, faults: list[str] | tuple[str, ...] = (), lookup: str = "truthful"):
        self.faults = list(faults)
        self.lookup_mode = lookup
        self.shipped: Counter[str] = Counter()
        self.handler_calls = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.seen_journal: list[str | None] = []
        self.store: GatewayStore = InMemoryGatewayStore()  # statically checked against the protocol

    def ship(self, item: str, ctx: ToolContext) -> dict[str, Any]:
        with self.lock:
            self.handler_calls += 1
            fault = self.faults.pop(0) if self.faults else "ok"
        record = self.store.get_side_effect(ctx.idempotency_key)
        self.seen_journal.append(record.status if record else None)
        if fault == "unavailable":
            raise ServiceUnavailable("503")
        if fault == "rate_limited":
            raise RateLimited(retry_after_s=0.5)
        if fault == "error":
            raise RuntimeError("crashed before shipping")
        if fault == "timeout_before":  # the request is lost: nothing happens, ever
            self.release.wait(10)
            raise ConnectionError("lost")
        with self.lock:
            self.shipped[ctx.idempotency_key] += 1
        ctx.emit_artifact("label", f"label for {item}")
        if fault == "timeout_after":  # shipped, but the answer is lost
            self.release.wait(10)
        return {"item": item, "tracking": f"T-{ctx.idempotency_key[-6:]}"}

    def lookup(self, key: str) -> tuple[LookupStatus, Any]:
        if self.lookup_mode == "unknown":
            return LookupStatus.UNKNOWN, None
        if self.lookup_mode == "broken":
            raise OSError("lookup endpoint down")
        with self.lock:
            done = self.shipped[key] > 0
        if done:
            return LookupStatus.SUCCEEDED, {"item": "book", "tracking": f"T-{key[-6:]}"}
        return LookupStatus.NOT_EXECUTED, None

    def gateway(self, max_attempts: int = 3) -> ToolGateway:
        spec = tool(
            name="ship",
            side_effect=True,
            timeout_s=TIMEOUT_S,
            retry=RetryPolicy(max_attempts=max_attempts, backoff_base_s=0.01),
            lookup=None if self.lookup_mode == "none" else self.lookup,
        )(self.ship)
        return ToolGateway(ToolRegistry([spec]), self.store, sleep=lambda s: None)

    def crash_mid_call(self, effect_happened: bool) -> None:
        """A previous process wrote STARTED and died (after or before the effect)."""
        self.store.put_side_effect(
            SideEffectRecord(
                idempotency_key=KEY,
                run_id="run-s",
                tool="ship",
                status="STARTED",
                updated_at=datetime.now(UTC),
            )
        )
        if effect_happened:
            self.shipped[KEY] += 1


def invoke(wh: Warehouse, gw: ToolGateway | None = None) -> ToolOutcome:
    return (gw or wh.gateway()).invoke(CALL, CTX)


def test_journal_says_started_while_the_handler_runs_and_succeeded_after() -> None:
    wh = Warehouse()
    out = invoke(wh)
    assert out.status is OutcomeStatus.SUCCESS
    assert out.idempotency_status is LookupStatus.SUCCEEDED
    assert wh.seen_journal == [SideEffectStatus.STARTED]
    record = wh.store.get_side_effect(KEY)
    assert record is not None and record.status == SideEffectStatus.SUCCEEDED


def test_second_invocation_replays_without_calling_the_handler() -> None:
    wh = Warehouse()
    first = invoke(wh)
    again = invoke(wh, wh.gateway())  # e.g. another process resuming the same step
    assert again.runtime_action is RuntimeAction.REPLAY_SUCCESS
    assert again.status is OutcomeStatus.SUCCESS
    assert again.result == first.result
    assert again.artifacts == first.artifacts
    assert again.handler_calls == 0
    assert wh.handler_calls == 1


def test_response_lost_then_lookup_succeeded_replays() -> None:
    wh = Warehouse(["timeout_after"])
    try:
        out = invoke(wh)
    finally:
        wh.release.set()
    assert (out.error_code, out.idempotency_status, out.runtime_action, out.status) == (
        ToolErrorCode.TIMEOUT,
        LookupStatus.SUCCEEDED,
        RuntimeAction.REPLAY_SUCCESS,
        OutcomeStatus.SUCCESS,
    )
    assert out.result == {"item": "book", "tracking": f"T-{KEY[-6:]}"}
    assert wh.handler_calls == 1
    assert sum(wh.shipped.values()) == 1


def test_request_lost_then_not_executed_retries_exactly_once() -> None:
    wh = Warehouse(["timeout_before"])
    try:
        out = invoke(wh)
    finally:
        wh.release.set()
    assert out.runtime_action is RuntimeAction.RETRY_ONCE
    assert out.status is OutcomeStatus.SUCCESS
    assert out.idempotency_status is LookupStatus.NOT_EXECUTED
    assert wh.handler_calls == 2
    assert sum(wh.shipped.values()) == 1


def test_single_retry_that_also_times_out_is_not_retried_again() -> None:
    wh = Warehouse(["timeout_before", "timeout_before"])
    try:
        out = invoke(wh)
    finally:
        wh.release.set()
    assert wh.handler_calls == 2
    assert out.status is OutcomeStatus.FAILED
    assert out.runtime_action is RuntimeAction.RETRY_ONCE
    assert sum(wh.shipped.values()) == 0


def test_unknown_outcome_waits_and_never_claims_success() -> None:
    for mode in ("unknown", "broken", "none"):
        wh = Warehouse(["timeout_after"], lookup=mode)
        gw = wh.gateway()
        try:
            first = invoke(wh, gw)
            second = invoke(wh, gw)  # the runtime must wait; asking again changes nothing
        finally:
            wh.release.set()
        for out in (first, second):
            assert out.status is OutcomeStatus.PENDING_VERIFICATION, mode
            assert out.runtime_action is RuntimeAction.AWAIT_RECONCILIATION
            assert out.result is None
        assert first.error_code is ToolErrorCode.TIMEOUT
        assert second.error_code is ToolErrorCode.UNKNOWN_OUTCOME
        assert wh.handler_calls == 1


def test_crash_mid_call_is_reconciled_before_running_again() -> None:
    wh = Warehouse()
    wh.crash_mid_call(effect_happened=True)
    out = invoke(wh)
    assert out.runtime_action is RuntimeAction.REPLAY_SUCCESS
    assert out.error_code is ToolErrorCode.UNKNOWN_OUTCOME
    assert wh.handler_calls == 0

    wh = Warehouse()
    wh.crash_mid_call(effect_happened=False)
    out = invoke(wh)
    assert out.runtime_action is RuntimeAction.RETRY_ONCE
    assert out.status is OutcomeStatus.SUCCESS
    assert wh.handler_calls == 1

    wh = Warehouse(lookup="none")
    wh.crash_mid_call(effect_happened=False)
    out = invoke(wh)
    assert out.status is OutcomeStatus.PENDING_VERIFICATION
    assert wh.handler_calls == 0


def test_a_result_that_breaks_the_output_schema_is_journalled_and_never_run_again() -> None:
    # The effect happened; only its answer broke the contract. Running it again would do it twice.
    wh = Warehouse()
    spec = tool(name="ship", side_effect=True, timeout_s=1, lookup=wh.lookup)(_bad_shipper(wh))
    gw = ToolGateway(ToolRegistry([spec]), wh.store, sleep=lambda s: None)
    first = gw.invoke(CALL, CTX)
    assert first.error_code is ToolErrorCode.SCHEMA_MISMATCH
    journal = wh.store.get_side_effect(KEY)
    assert journal is not None and journal.status == "COMPLETED_INVALID"
    again = gw.invoke(CALL, CTX)
    assert again.error_code is ToolErrorCode.SCHEMA_MISMATCH
    assert wh.handler_calls == 1


def _bad_shipper(wh: Warehouse) -> Any:
    def ship(item: str, ctx: ToolContext) -> dict[str, str]:
        wh.ship(item, ctx)
        return {"item": item, "tracking": 42}  # type: ignore[dict-item]  # breaks its own declared output

    return ship


def test_a_looked_up_result_is_held_to_the_output_schema_too() -> None:
    wh = Warehouse()
    wh.crash_mid_call(effect_happened=True)
    spec = tool(name="ship", side_effect=True, timeout_s=1, lookup=lambda key: (LookupStatus.SUCCEEDED, "yes"))(
        _bad_shipper(wh)
    )
    out = ToolGateway(ToolRegistry([spec]), wh.store, sleep=lambda s: None).invoke(CALL, CTX)
    assert (out.error_code, out.last_error_code) == (ToolErrorCode.UNKNOWN_OUTCOME, ToolErrorCode.SCHEMA_MISMATCH)
    assert out.runtime_action is RuntimeAction.BLOCK
    journal = wh.store.get_side_effect(KEY)
    assert journal is not None and journal.status == "COMPLETED_INVALID"
    assert wh.handler_calls == 0


def test_a_fencing_lookup_is_told_which_run_and_lease_asks() -> None:
    asked: list[tuple[str, str, int | None]] = []
    wh = Warehouse()
    wh.crash_mid_call(effect_happened=False)

    def fenced_lookup(key: str, *, run_id: str, fencing_token: int | None) -> tuple[LookupStatus, Any]:
        asked.append((key, run_id, fencing_token))
        return wh.lookup(key)

    spec = tool(name="ship", side_effect=True, timeout_s=1, lookup=fenced_lookup)(wh.ship)
    gw = ToolGateway(ToolRegistry([spec]), wh.store, sleep=lambda s: None)
    out = gw.invoke(CALL, CallContext(run_id="run-s", step=4, fencing_token=7))
    assert out.runtime_action is RuntimeAction.RETRY_ONCE and wh.handler_calls == 1
    assert asked == [(KEY, "run-s", 7)]
    record = wh.store.get_side_effect(KEY)
    assert record is not None
    gw.reconcile(record, fencing_token=9)  # on resume: the resuming holder's lease
    assert asked[-1] == (KEY, "run-s", 9)


def test_reconcile_journals_what_the_lookup_said() -> None:
    for happened, status, lookup in (
        (True, "SUCCEEDED", LookupStatus.SUCCEEDED),
        (False, "FAILED", LookupStatus.NOT_EXECUTED),
    ):
        wh = Warehouse()
        wh.crash_mid_call(effect_happened=happened)
        record = wh.store.get_side_effect(KEY)
        assert record is not None
        assert wh.gateway().reconcile(record) is lookup
        after = wh.store.get_side_effect(KEY)
        assert after is not None and after.status == status  # NOT_EXECUTED: safe to run again
    wh = Warehouse(lookup="unknown")
    wh.crash_mid_call(effect_happened=True)
    record = wh.store.get_side_effect(KEY)
    assert record is not None
    assert wh.gateway().reconcile(record) is LookupStatus.UNKNOWN
    left = wh.store.get_side_effect(KEY)
    assert left is not None and left.status == "STARTED"  # nobody may claim anything


FAULTS = st.sampled_from(["ok", "unavailable", "rate_limited", "error", "timeout_before", "timeout_after"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Found by hypothesis: three failures open the circuit, and the next call is refused before it gets a key.
@example(faults=["unavailable"] * 3, lookup="truthful", crash=None, invocations=2, max_attempts=3)
@given(
    faults=st.lists(FAULTS, max_size=6),
    lookup=st.sampled_from(["truthful", "unknown", "broken", "none"]),
    crash=st.sampled_from([None, "before_effect", "after_effect"]),
    invocations=st.integers(1, 3),
    max_attempts=st.integers(1, 3),
)
def test_side_effect_happens_at_most_once_per_key(
    faults: list[str], lookup: str, crash: str | None, invocations: int, max_attempts: int
) -> None:
    wh = Warehouse(faults, lookup=lookup)
    if crash is not None:
        wh.crash_mid_call(effect_happened=crash == "after_effect")
    try:
        for _ in range(invocations):
            before = wh.handler_calls
            out = invoke(wh, wh.gateway(max_attempts))
            shipped = wh.shipped[KEY]
            assert shipped <= 1
            if out.status is OutcomeStatus.SUCCESS:
                assert shipped == 1  # success is only ever claimed for an effect that happened
                assert out.result["item"] == "book"
            if out.status is OutcomeStatus.PENDING_VERIFICATION:
                assert out.result is None
            if out.status is OutcomeStatus.REJECTED:  # refused before admission: no key, the handler never ran
                assert out.idempotency_key is None and wh.handler_calls == before
            else:
                assert out.idempotency_key == KEY
    finally:
        wh.release.set()
    assert sum(wh.shipped.values()) <= 1


def _grant_for(tool_name: str, args: dict[str, Any], request_id: str = "approval_001") -> Grant:
    return Grant(request_id=request_id, action=guard(tool_name, args))


def test_a_grant_admits_only_its_own_call_and_only_once() -> None:
    """The gate, not only the Runtime: a grant for one call admits no other, and a ONCE grant one start."""
    paid: list[str] = []

    @tool(requires_approval=True)
    def pay(invoice: str) -> dict[str, str]:
        paid.append(invoice)
        return {"paid": invoice}

    gateway = ToolGateway(ToolRegistry([pay]), InMemoryGatewayStore())
    grant = _grant_for("pay", {"invoice": "A"})

    def call(invoice: str, step: int) -> ToolOutcome:
        ctx = CallContext(run_id="r", step=step, grants=(grant,))
        return gateway.invoke(ToolCall(tool="pay", args={"invoice": invoice}), ctx)

    other = call("B", 1)
    assert other.status is OutcomeStatus.BLOCKED and paid == [] and other.consumed_grant is None

    first = call("A", 2)
    assert first.status is OutcomeStatus.SUCCESS and first.consumed_grant == "approval_001" and paid == ["A"]

    # A caller that kept the used grant (a crash between the journal and the step) is refused at the journal.
    again = call("A", 3)
    assert again.status is OutcomeStatus.BLOCKED and paid == ["A"] and again.handler_calls == 0

    # The same step retried (same idempotency key) replays; it does not need a second grant.
    replay = call("A", 2)
    assert replay.status is OutcomeStatus.SUCCESS and paid == ["A"]


def test_a_standing_grant_admits_the_call_again() -> None:
    paid: list[int] = []

    @tool(requires_approval=True, approval_scope=ApprovalScope.RUN)
    def pay(invoice: str) -> int:
        paid.append(1)
        return len(paid)

    gateway = ToolGateway(ToolRegistry([pay]), InMemoryGatewayStore())
    grant = Grant(request_id="approval_001", action=guard("pay", {"invoice": "A"}), scope=ApprovalScope.RUN)
    for step in (1, 2, 3):
        ctx = CallContext(run_id="r", step=step, grants=(grant,))
        out = gateway.invoke(ToolCall(tool="pay", args={"invoice": "A"}), ctx)
        assert out.status is OutcomeStatus.SUCCESS and out.consumed_grant is None
    assert paid == [1, 1, 1]


def test_requires_approval_implies_the_journal() -> None:
    @tool(requires_approval=True)
    def pay(invoice: str) -> None: ...

    assert pay.side_effect is True
