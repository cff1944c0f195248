"""Retrying only what can succeed later, telling the runtime first; recording and deterministic replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.errors import UserError
from stateward.models.base import ModelReply, ModelRequest, Usage
from stateward.models.errors import (
    AuthFailedError,
    ContextLengthExceededError,
    ModelCallError,
    RateLimitedError,
    ServiceUnavailableError,
)
from stateward.models.recording import RecordingModel, ReplayModel, request_key
from stateward.models.retrying import AttemptRecord, RetryingModel
from stateward.models.scripted import ScriptedModel


class Flaky:
    """Raises the given errors in order, then answers."""

    name = "flaky"

    def __init__(self, errors: list[ModelCallError]):
        self.errors = list(errors)
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return ModelReply(text='{"type": "FINISH", "reason": "ok"}', usage=Usage(input_tokens=3), model=self.name)


def _retrying(inner: Flaky, log: list[str], **kw: int) -> RetryingModel:
    def on_attempt(record: AttemptRecord) -> None:
        log.append(f"attempt {record.attempt} {record.code} retry={record.will_retry}")

    def sleep(seconds: float) -> None:
        log.append(f"sleep {seconds}")

    return RetryingModel(inner, kw.get("max_attempts", 3), sleep=sleep, on_attempt=on_attempt, base_delay_s=1.0)


def test_retryable_errors_are_retried_and_reported_before_each_retry(decide_request: ModelRequest) -> None:
    log: list[str] = []
    inner = Flaky([RateLimitedError("slow down", retry_after_s=5.0), ServiceUnavailableError("502")])
    reply = _retrying(inner, log).complete(decide_request)
    assert reply.text.startswith('{"type": "FINISH"')
    assert inner.calls == 3
    # Retry-After wins over a shorter backoff; the callback always comes before the sleep and the retry.
    assert log == [
        "attempt 1 RATE_LIMITED retry=True",
        "sleep 5.0",
        "attempt 2 SERVICE_UNAVAILABLE retry=True",
        "sleep 2.0",
    ]


@pytest.mark.parametrize("make", [lambda: AuthFailedError("401"), lambda: ContextLengthExceededError("too long")])
def test_non_retryable_errors_are_raised_at_once(
    decide_request: ModelRequest, make: Callable[[], ModelCallError]
) -> None:
    log: list[str] = []
    inner = Flaky([make()])
    with pytest.raises(ModelCallError) as err:
        _retrying(inner, log).complete(decide_request)
    assert inner.calls == 1 and not err.value.retryable
    assert log == [f"attempt 1 {err.value.code} retry=False"]


def test_backoff_doubles_up_to_its_cap_and_never_undercuts_retry_after() -> None:
    model = RetryingModel(ScriptedModel(lambda r: {"type": "FINISH"}), base_delay_s=1.0, max_delay_s=30.0)
    plain = ServiceUnavailableError("busy")
    assert [model.delay_for(n, plain) for n in (1, 2, 3, 5, 6, 10)] == [1.0, 2.0, 4.0, 16.0, 30.0, 30.0]
    assert model.delay_for(1, RateLimitedError("slow down", retry_after_s=45.0)) == 45.0


def test_attempts_are_bounded(decide_request: ModelRequest) -> None:
    log: list[str] = []
    inner = Flaky([ServiceUnavailableError("down")] * 5)
    with pytest.raises(ModelCallError) as err:
        _retrying(inner, log, max_attempts=2).complete(decide_request)
    assert (inner.calls, err.value.code, err.value.details["attempts"]) == (2, "SERVICE_UNAVAILABLE", 2)
    assert log[-1] == "attempt 2 SERVICE_UNAVAILABLE retry=False"


def test_recording_then_replay_is_deterministic_and_offline(tmp_path: Path, decide_request: ModelRequest) -> None:
    path = tmp_path / "rec.jsonl"
    other = decide_request.model_copy(update={"goal": "another goal"})
    recorder = RecordingModel(Flaky([]), path)
    first = recorder.complete(decide_request)
    with pytest.raises(ModelCallError):
        RecordingModel(Flaky([AuthFailedError("bad key", provider="openai", status_code=401)]), path).complete(other)

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [("reply" in e, "error" in e) for e in lines] == [(True, False), (False, True)]
    assert lines[0]["key"] == request_key(decide_request)

    replay = ReplayModel(path)
    assert replay.complete(decide_request) == first
    assert replay.complete(decide_request) == first  # asked again: the same answer
    with pytest.raises(ModelCallError) as err:
        replay.complete(other)  # recorded errors replay as the same named error
    assert (err.value.code, err.value.status_code) == ("AUTH_FAILED", 401)


class Counting:
    """Answers the n-th call with FINISH reason "n"."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        return ModelReply(text=f'{{"type": "FINISH", "reason": "{self.calls}"}}', usage=Usage(), model=self.name)


def test_the_nth_identical_request_replays_the_nth_answer_then_the_last(
    tmp_path: Path, decide_request: ModelRequest
) -> None:
    path = tmp_path / "rec.jsonl"
    recorder = RecordingModel(Counting(), path)
    recorded = [recorder.complete(decide_request).text for _ in range(3)]
    replay = ReplayModel(path)
    assert [replay.complete(decide_request).text for _ in range(5)] == [*recorded, recorded[-1], recorded[-1]]


def test_a_replayed_rate_limit_keeps_its_retry_after(tmp_path: Path, decide_request: ModelRequest) -> None:
    path = tmp_path / "rec.jsonl"
    with pytest.raises(RateLimitedError):
        RecordingModel(Flaky([RateLimitedError("slow down", retry_after_s=12.5)]), path).complete(decide_request)
    with pytest.raises(RateLimitedError) as err:
        ReplayModel(path).complete(decide_request)
    assert err.value.retry_after_s == 12.5 and err.value.retryable


def test_an_unrecorded_request_is_a_replay_miss(tmp_path: Path, decide_request: ModelRequest) -> None:
    path = tmp_path / "rec.jsonl"
    RecordingModel(Flaky([]), path).complete(decide_request)
    changed = decide_request.model_copy(update={"observations": [{"step": 1}]})
    with pytest.raises(ModelCallError) as err:
        ReplayModel(path).complete(changed)
    assert err.value.code == "REPLAY_MISS" and not err.value.retryable


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8\n", ("[" * 100_000).encode()])
def test_a_recording_that_cannot_be_read_is_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        ReplayModel(path)
    assert err.value.code == "INVALID_RECORDING"


def test_request_key_ignores_key_order_but_not_content(decide_request: ModelRequest) -> None:
    same = ModelRequest.model_validate(json.loads(decide_request.model_dump_json()))
    assert request_key(same) == request_key(decide_request)
    assert request_key(decide_request.model_copy(update={"correction": "x"})) != request_key(decide_request)


def test_request_key_names_a_contract_only_when_it_is_not_the_purposes_default(decide_request: ModelRequest) -> None:
    """Recordings made before requests named their contract still answer a decision, a step plan, a patch;
    a plan run's plan document (once sent the step plan's schema) is a request of its own."""
    from stateward.models import ReplyContract

    plan = decide_request.model_copy(update={"purpose": "plan"})
    as_before = sha256_hex(canonical_json({k: v for k, v in plan.model_dump(mode="json").items() if k != "contract"}))
    assert request_key(plan.model_copy(update={"contract": ReplyContract.STEP_PLAN})) == request_key(plan) == as_before
    assert request_key(plan.model_copy(update={"contract": ReplyContract.PLAN_DOCUMENT})) != as_before


def test_a_replayed_reply_under_a_renamed_code_reads_as_its_new_name(
    tmp_path: Path, decide_request: ModelRequest
) -> None:
    path = tmp_path / "old.jsonl"
    reply = {"text": '{"type": "FIN', "rejection_code": "MAX_TOKENS_REACHED", "rejection_message": "cut off"}
    path.write_text(json.dumps({"key": request_key(decide_request), "reply": reply}) + "\n")
    replayed = ReplayModel(path).complete(decide_request)
    assert replayed.rejection_code == "REPLY_TRUNCATED"
