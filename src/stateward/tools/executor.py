"""Execution of an admitted call: attempts under timeout, bounded retries, the side-effect journal
and UNKNOWN_OUTCOME reconciliation.

A side-effecting handler runs at most once per idempotency key: a STARTED journal entry is written
before it runs; afterwards only ``lookup`` (what the domain says really happened) may justify running
it again, and then exactly once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from stateward.core.errors import StatewardError
from stateward.core.interrupt import pause_token
from stateward.core.journal import AttemptRecord, SideEffectRecord, SideEffectStatus
from stateward.core.state import PersonOutcome

from .breaker import CircuitBreaker
from .execution import call_handler
from .ports import GatewayStore
from .results import Shaped, shape_result
from .retry import OUTCOME_UNKNOWN, backoff_delay, classify, is_retryable
from .spec import ToolContext
from .stages import CallState, has_budget
from .types import (
    ArtifactDraft,
    LookupStatus,
    OutcomeStatus,
    RuntimeAction,
    ToolErrorCode,
    ToolOutcome,
)

# The handler finished (its effect happened) but its result broke the output contract: never re-run.
COMPLETED_INVALID = "COMPLETED_INVALID"
# Entries that keep the call's note (the retry a person's NOT_EXECUTED allowed): a crash never makes it a first try.
_NOTED = frozenset(
    {SideEffectStatus.STARTED, SideEffectStatus.UNKNOWN_OUTCOME, SideEffectStatus.FAILED, COMPLETED_INVALID}
)
_IN_FLIGHT = frozenset({SideEffectStatus.STARTED, SideEffectStatus.UNKNOWN_OUTCOME})
# The store's refusal of a second journalled start under one ONCE approval.
APPROVAL_CONSUMED = "APPROVAL_CONSUMED"


@dataclass
class Attempt:
    code: ToolErrorCode | None
    value: Any = None
    message: str | None = None
    exc: BaseException | None = None
    artifacts: list[ArtifactDraft] = field(default_factory=list)
    shaped: Shaped | None = None  # a success, redacted and bounded: what is journalled and returned


class Executor:
    def __init__(self, store: GatewayStore, breaker: CircuitBreaker, sleep: Callable[[float], None]):
        self._store = store
        self._breaker = breaker
        self._sleep = sleep

    # -- entry ---------------------------------------------------------------------------------
    def run(self, st: CallState) -> ToolOutcome:
        if st.tool_spec.side_effect and st.ctx.reconciliation is not None:
            return self._person_said(st, st.ctx.reconciliation)
        if st.tool_spec.side_effect:
            record = self._store.get_side_effect(self._key(st))
            if record is not None:
                replay = self._from_journal(st, record)
                if replay is not None:
                    return replay
        return self._attempt_loop(st)

    def _from_journal(self, st: CallState, record: SideEffectRecord) -> ToolOutcome | None:
        if record.status == SideEffectStatus.SUCCEEDED:
            envelope = record.result if isinstance(record.result, dict) else {}
            artifacts = [ArtifactDraft.model_validate(a) for a in envelope.get("artifacts", [])]
            self._note(st, "REPLAYED", None, "result replayed from the side-effect journal")
            st.idempotency_status = LookupStatus.SUCCEEDED
            shaped = _journalled_shape(envelope)  # None: an entry journalled whole, before results were bounded
            return self._success(st, envelope.get("result"), RuntimeAction.REPLAY_SUCCESS, artifacts, shaped)
        if record.status == COMPLETED_INVALID:
            self._note(st, "REPLAYED", ToolErrorCode.SCHEMA_MISMATCH, "recorded result broke the contract")
            return self._failure(
                st,
                ToolErrorCode.SCHEMA_MISMATCH,
                "result does not match the output schema",
                RuntimeAction.BLOCK,
            )
        if record.status in (SideEffectStatus.STARTED, SideEffectStatus.UNKNOWN_OUTCOME):
            st.note_failure(ToolErrorCode.UNKNOWN_OUTCOME)
            return self._reconcile(st, "an earlier attempt did not report its outcome")
        return None  # FAILED: nothing happened, run it normally

    # -- a person's answer to a reconciliation -------------------------------------------------
    def _person_said(self, st: CallState, said: PersonOutcome) -> ToolOutcome:
        """Record what a person said became of the call under its journalled key; the handler runs again only
        for the single retry a clear NOT_EXECUTED allows. Safe to repeat after a crash: the journal says how far
        it got (a confirmation replays, a retry already started is reconciled, never started twice)."""
        record = self._store.get_side_effect(self._key(st))
        if record is not None and record.status == SideEffectStatus.SUCCEEDED:
            replayed = self._from_journal(st, record)  # recorded already (a crash after it, or a real success)
            assert replayed is not None
            return replayed
        note = record.result if record is not None and isinstance(record.result, dict) else {}
        if record is not None and note.get("retry_after") == said.request_id:
            return self._retried(st, record, note)
        evidence = said.evidence()
        if said.happened:
            shaped = shape_result(st.tool_spec, evidence)
            self._journal(st, SideEffectStatus.SUCCEEDED, _envelope(shaped, []))
            self._note(st, "CONFIRMED_BY_PERSON", None, f"{said.by} confirmed it happened ({said.request_id})")
            st.idempotency_status = LookupStatus.SUCCEEDED
            return self._success(st, evidence, RuntimeAction.CONFIRMED_BY_PERSON, [], shaped)
        self._journal(st, SideEffectStatus.NOT_EXECUTED, evidence)
        self._note(st, "NOT_EXECUTED_BY_PERSON", None, f"{said.by} said it did not happen ({said.request_id})")
        st.idempotency_status = LookupStatus.NOT_EXECUTED
        reason = f"{said.by} said {st.tool_spec.name} did not happen"
        if said.retry_spent or st.tool_spec.retry.max_attempts < 2:
            why = "its single retry was spent" if said.retry_spent else "its retry policy allows no retry"
            st.note_failure(ToolErrorCode.NOT_EXECUTED)
            return self._outcome(
                st,
                OutcomeStatus.FAILED,
                RuntimeAction.NOT_EXECUTED_BY_PERSON,
                ToolErrorCode.NOT_EXECUTED,
                f"{reason}, and {why}",
                result=evidence,
            )
        st.journal_note = {"retry_after": said.request_id, **evidence}
        return self._retry_once(st, reason)

    def _retried(self, st: CallState, record: SideEffectRecord, note: dict[str, Any]) -> ToolOutcome:
        """The retry a person's answer allowed was already made (the step recording it was lost): its journalled
        outcome stands, and it is never made a second time."""
        st.retried_once, st.journal_note = True, note
        if record.status in _IN_FLIGHT:
            st.note_failure(ToolErrorCode.UNKNOWN_OUTCOME)
            return self._reconcile(st, "the retry after a person's NOT_EXECUTED did not report its outcome")
        replayed = self._from_journal(st, record)  # a result that broke its contract stays that failure
        if replayed is not None:
            return replayed
        return self._failure(
            st,
            ToolErrorCode.EXECUTION_ERROR,
            "the retry after a person's NOT_EXECUTED failed",
            RuntimeAction.RETRY_ONCE,
        )

    # -- attempts and retries ------------------------------------------------------------------
    def _attempt_loop(self, st: CallState) -> ToolOutcome:
        spec = st.tool_spec
        action = RuntimeAction.EXECUTE
        for retry_number in range(1, spec.retry.max_attempts + 1):
            res = self._attempt(st)
            if res.code is None:
                return self._success(st, res.value, action, res.artifacts, res.shaped)
            message = res.message or res.code.value
            if res.code in OUTCOME_UNKNOWN and spec.side_effect:
                return self._reconcile(st, message)
            if res.code is ToolErrorCode.SCHEMA_MISMATCH:
                return self._failure(st, res.code, message, RuntimeAction.BLOCK)
            if res.code is ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY:
                return self._blocked(st, message)
            if not is_retryable(res.code, side_effect=spec.side_effect):
                return self._failure(st, res.code, message, action)
            if retry_number == spec.retry.max_attempts:
                return self._failure(st, res.code, f"{message} (gave up after {retry_number} attempts)", action)
            delay = backoff_delay(spec.retry, retry_number, res.exc)
            if delay is None:
                return self._failure(st, res.code, f"{message} (Retry-After too long)", action)
            if self._breaker.is_open(spec.name):
                self._note(st, "REJECTED", ToolErrorCode.CIRCUIT_OPEN, "circuit opened; retry stopped")
                return self._failure(st, ToolErrorCode.CIRCUIT_OPEN, "circuit opened during retries", action)
            if not has_budget(st):
                self._note(st, "REJECTED", ToolErrorCode.BUDGET_EXCEEDED, "no budget left for a retry")
                return self._failure(st, res.code, f"{message} (no tool-call budget left to retry)", action)
            st.budget_used += 1
            self._sleep(delay)
            action = RuntimeAction.RETRY
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _attempt(self, st: CallState) -> Attempt:
        """One handler call, journalled (side effects), fed to the breaker, recorded as an attempt."""
        spec, key = st.tool_spec, self._key(st)
        assert st.validated is not None
        if spec.side_effect:
            consumed = self._journal_start(st)
            if consumed is not None:
                self._note(st, "REJECTED", consumed.code, consumed.message)
                return consumed
        tctx = ToolContext(
            run_id=st.ctx.run_id,
            step=st.ctx.step,
            idempotency_key=key,
            principal=st.ctx.principal,
            fencing_token=st.ctx.fencing_token,
        )
        kwargs = spec.handler_kwargs(st.validated, tctx)
        started = time.perf_counter()
        # A read-only call gives way to a pause asked meanwhile; one with a side effect is waited for (up to its
        # timeout; an unknown outcome is reconciled below), never cancelled blindly.
        token = None if spec.side_effect else pause_token.get()
        fin = call_handler(
            spec.handler, kwargs, spec.timeout_s, name=spec.name, token=token, is_async=spec.handler_is_async
        )
        duration_ms = (time.perf_counter() - started) * 1000
        res = self._classify(st, fin.value, fin.error, fin.timed_out)
        res.artifacts = tctx.artifacts
        if res.code is None:
            res.shaped = shape_result(spec, res.value)  # before the journal: it never holds more than the run sees
        self._breaker.record(spec.name, spec.breaker, res.code, admitted=st.breaker_admitted)
        st.breaker_admitted = None  # recorded: a later attempt reads the circuit afresh
        if spec.side_effect:
            self._journal_after(st, res, fin.value)
        if res.code is not None:
            st.note_failure(res.code)
        self._note(st, res.code.value if res.code else "SUCCESS", res.code, res.message, duration_ms, True)
        return res

    def _classify(self, st: CallState, value: Any, error: BaseException | None, timed_out: bool) -> Attempt:
        spec = st.tool_spec
        if timed_out:
            return Attempt(ToolErrorCode.TIMEOUT, message=f"no answer within {spec.timeout_s}s")
        if error is not None:
            return Attempt(classify(error), message=f"{type(error).__name__}: {error}", exc=error)
        try:
            return Attempt(None, value=spec.validate_output(value))
        except ValidationError as exc:
            return Attempt(ToolErrorCode.SCHEMA_MISMATCH, message=f"result does not match the output schema: {exc}")

    def _journal_after(self, st: CallState, res: Attempt, raw: Any) -> None:
        if res.code is None:
            assert res.shaped is not None
            self._journal(st, SideEffectStatus.SUCCEEDED, _envelope(res.shaped, res.artifacts))
        elif res.code is ToolErrorCode.SCHEMA_MISMATCH:
            self._journal(st, COMPLETED_INVALID)
        elif res.code not in OUTCOME_UNKNOWN:
            self._journal(st, SideEffectStatus.FAILED)
        # TIMEOUT / UNKNOWN_OUTCOME: reconciliation marks the entry UNKNOWN_OUTCOME

    # -- UNKNOWN_OUTCOME -------------------------------------------------------------------------
    def _reconcile(self, st: CallState, reason: str) -> ToolOutcome:
        """Ask the domain what happened; never claim success and never re-run without its word."""
        spec, key = st.tool_spec, self._key(st)
        self._journal(st, SideEffectStatus.UNKNOWN_OUTCOME)
        if spec.lookup is None:
            return self._pending(st, f"{reason}; {spec.name!r} has no lookup to reconcile with")
        try:
            status, result = spec.look_up(key, run_id=st.ctx.run_id, fencing_token=st.ctx.fencing_token)
            status = LookupStatus(status)
        except Exception as exc:
            status, result = LookupStatus.UNKNOWN, None
            reason = f"{reason}; lookup failed: {type(exc).__name__}: {exc}"
        st.idempotency_status = status
        self._note(st, f"LOOKUP_{status.value}", None, None)
        if status is LookupStatus.SUCCEEDED:
            return self._confirmed(st, result)
        if status is LookupStatus.NOT_EXECUTED and not st.retried_once:
            return self._retry_once(st, reason)
        if status is LookupStatus.NOT_EXECUTED:
            return self._failure(
                st,
                ToolErrorCode.TIMEOUT,
                f"{reason}; the single retry did not answer either",
                RuntimeAction.RETRY_ONCE,
            )
        return self._pending(st, f"{reason}; the domain cannot say whether it happened")

    def _confirmed(self, st: CallState, result: Any) -> ToolOutcome:
        try:
            value = st.tool_spec.validate_output(result)
        except ValidationError as exc:
            self._journal(st, COMPLETED_INVALID)
            return self._failure(
                st, ToolErrorCode.SCHEMA_MISMATCH, f"looked-up result is invalid: {exc}", RuntimeAction.BLOCK
            )
        shaped = shape_result(st.tool_spec, value)
        self._journal(st, SideEffectStatus.SUCCEEDED, _envelope(shaped, []))
        return self._success(st, value, RuntimeAction.REPLAY_SUCCESS, [], shaped)

    def _retry_once(self, st: CallState, reason: str) -> ToolOutcome:
        if not has_budget(st):
            self._note(st, "REJECTED", ToolErrorCode.BUDGET_EXCEEDED, "no budget left for the single retry")
            return self._failure(
                st,
                ToolErrorCode.BUDGET_EXCEEDED,
                f"{reason}; no budget left to retry",
                RuntimeAction.RETRY_ONCE,
            )
        st.budget_used += 1
        st.retried_once = True
        res = self._attempt(st)
        if res.code is None:
            return self._success(st, res.value, RuntimeAction.RETRY_ONCE, res.artifacts, res.shaped)
        if res.code in OUTCOME_UNKNOWN:
            return self._reconcile(st, res.message or "timeout")
        action = RuntimeAction.BLOCK if res.code is ToolErrorCode.SCHEMA_MISMATCH else RuntimeAction.RETRY_ONCE
        return self._failure(st, res.code, res.message or res.code.value, action)

    # -- outcomes ----------------------------------------------------------------------------------
    def _success(
        self,
        st: CallState,
        value: Any,
        action: RuntimeAction,
        artifacts: list[ArtifactDraft],
        shaped: Shaped | None = None,
    ) -> ToolOutcome:
        spec = st.tool_spec
        shaped = shaped or shape_result(spec, value)
        if shaped.too_large:
            msg = f"result of {shaped.size} bytes exceeds the limit of {spec.max_result_bytes}"
            return self._failure(st, ToolErrorCode.RESULT_TOO_LARGE, msg, action)
        if spec.side_effect and st.idempotency_status is None:
            st.idempotency_status = LookupStatus.SUCCEEDED
        redacted = [a.model_copy(update={"content": spec.redact.text(a.content)}) for a in artifacts]
        return self._outcome(st, OutcomeStatus.SUCCESS, action, None, None, shaped.result, redacted, shaped.truncated)

    def _failure(self, st: CallState, code: ToolErrorCode, message: str, action: RuntimeAction) -> ToolOutcome:
        st.note_failure(code)
        return self._outcome(st, OutcomeStatus.FAILED, action, code, message)

    def _blocked(self, st: CallState, message: str) -> ToolOutcome:
        st.note_failure(ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY)
        return self._outcome(
            st, OutcomeStatus.BLOCKED, RuntimeAction.BLOCK, ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY, message
        )

    def _pending(self, st: CallState, message: str) -> ToolOutcome:
        st.idempotency_status = st.idempotency_status or LookupStatus.UNKNOWN
        return self._outcome(
            st,
            OutcomeStatus.PENDING_VERIFICATION,
            RuntimeAction.AWAIT_RECONCILIATION,
            ToolErrorCode.UNKNOWN_OUTCOME,
            message,
        )

    def _outcome(
        self,
        st: CallState,
        status: OutcomeStatus,
        action: RuntimeAction,
        last: ToolErrorCode | None,
        message: str | None,
        result: Any = None,
        artifacts: list[ArtifactDraft] | None = None,
        truncated: bool = False,
    ) -> ToolOutcome:
        return ToolOutcome(
            tool=st.tool_spec.name,
            status=status,
            runtime_action=action,
            result=result,
            error_code=st.first_error,
            last_error_code=last,
            error=st.tool_spec.redact.text(message) if message else None,
            idempotency_key=st.key,
            idempotency_status=st.idempotency_status,
            attempts=list(st.attempts),
            artifacts=artifacts or [],
            truncated=truncated,
            action_digest=st.digest,
            budget_used=st.budget_used,
            consumed_grant=st.once_grant,
            retried_once=st.retried_once,
        )

    # -- bookkeeping ---------------------------------------------------------------------------------
    @staticmethod
    def _key(st: CallState) -> str:
        assert st.key is not None, "stage ordering: the idempotency key is assigned before execution"
        return st.key

    def _journal(self, st: CallState, status: str, result: Any = None) -> None:
        if result is None and status in _NOTED:
            result = st.journal_note  # a retry a person allowed stays marked as that retry, whatever befalls it
        self._store.put_side_effect(
            SideEffectRecord(
                idempotency_key=self._key(st),
                run_id=st.ctx.run_id,
                tool=st.tool_spec.name,
                status=status,
                result=result,
                updated_at=datetime.now(UTC),
                grant_id=st.once_grant,
                fencing_token=st.ctx.fencing_token,
            )
        )

    def _journal_start(self, st: CallState) -> Attempt | None:
        """Journal STARTED; for a guarded call this one write also consumes its approval (the store
        lets one idempotency key hold a ONCE grant). A grant another call already used admits nothing."""
        try:
            self._journal(st, SideEffectStatus.STARTED)
        except StatewardError as exc:
            if exc.code != APPROVAL_CONSUMED:
                raise
            return Attempt(ToolErrorCode.BLOCKED_BY_ACTION_GATEWAY, message=exc.message)
        return None

    def _note(
        self,
        st: CallState,
        outcome: str,
        code: ToolErrorCode | None,
        message: str | None,
        duration_ms: float = 0.0,
        handler_called: bool = False,
    ) -> None:
        st.attempts.append(make_attempt(st, outcome, code, message, duration_ms, handler_called))


def _envelope(shaped: Shaped, artifacts: list[ArtifactDraft]) -> dict[str, Any]:
    """A journalled success: the shaped (redacted, bounded) result, never the handler's raw one."""
    return {
        "result": shaped.result,
        "artifacts": [a.model_dump() for a in artifacts],
        "shape": {"truncated": shaped.truncated, "too_large": shaped.too_large, "size": shaped.size},
    }


def _journalled_shape(envelope: dict[str, Any]) -> Shaped | None:
    shape = envelope.get("shape")
    if not isinstance(shape, dict):
        return None
    return Shaped(
        envelope.get("result"),
        truncated=bool(shape.get("truncated")),
        too_large=bool(shape.get("too_large")),
        size=int(shape.get("size") or 0),
    )


def make_attempt(
    st: CallState,
    outcome: str,
    code: ToolErrorCode | None,
    message: str | None,
    duration_ms: float = 0.0,
    handler_called: bool = False,
) -> AttemptRecord:
    error = None
    if message:
        error = st.spec.redact.text(message) if st.spec is not None else message
    return AttemptRecord(
        attempt_id=f"att_{os.urandom(8).hex()}",  # 64 random bits (the 16 hex digits once cut from a uuid4)
        run_id=st.ctx.run_id,
        step=st.ctx.step,
        sequence=len(st.attempts) + 1,
        tool=st.call.tool,
        input_hash=st.input_hash,
        idempotency_key=st.key,
        outcome=outcome,
        error_code=code.value if code else None,
        error=error,
        duration_ms=round(duration_ms, 3),
        handler_called=handler_called,
    )
