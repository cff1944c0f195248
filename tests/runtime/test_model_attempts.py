"""A model call that may have reached the provider is recorded, and counted, before it is retried."""

from __future__ import annotations

from stateward import RunStatus, Runtime
from stateward.core.events import EventType
from stateward.models.base import ModelReply, ModelRequest
from stateward.models.errors import AuthFailedError, ServiceUnavailableError
from stateward.models.retrying import RetryingModel
from stateward.models.scripted import ScriptedModel
from stateward_demos import blog_fixtures as fx
from stateward_demos.blog import build_agent


class Flaky:
    """The scripted blog model behind a provider that drops the first ``failures`` calls."""

    name = "flaky"

    def __init__(self, failures: int, error: type[Exception] = ServiceUnavailableError):
        self.failures = failures
        self.error = error
        self.inner = ScriptedModel(fx.react_policy)

    def complete(self, request: ModelRequest) -> ModelReply:
        if self.failures > 0:
            self.failures -= 1
            raise self.error("upstream 503")
        return self.inner.complete(request)


def test_failed_attempts_are_recorded_and_counted_before_the_retry(runtime: Runtime) -> None:
    model = RetryingModel(Flaky(2), max_attempts=3, sleep=lambda s: None)
    state = runtime.start(build_agent("react", model=model), fx.GOAL)
    assert state.status is RunStatus.WAITING_FOR_USER
    types = [e.type for e in runtime.store.read_events(state.run_id)]
    first_signal = types.index(EventType.SIGNAL_RECEIVED)
    assert types[:first_signal].count(EventType.MODEL_CALL_FAILED) == 2  # durable before the retry succeeded
    assert state.usage.model_calls == 5 + 2  # the two attempts that may have cost money are in the budget


def test_a_non_retryable_failure_fails_the_run_by_name(runtime: Runtime) -> None:
    model = RetryingModel(Flaky(1, AuthFailedError), max_attempts=3, sleep=lambda s: None)
    state = runtime.start(build_agent("react", model=model), fx.GOAL)
    assert state.status is RunStatus.FAILED and state.terminal_reason == "auth_failed"
    failed = [e.payload for e in runtime.store.read_events(state.run_id) if e.type is EventType.MODEL_CALL_FAILED]
    assert [(f["code"], f["will_retry"]) for f in failed] == [("AUTH_FAILED", False)]
    assert state.usage.model_calls == 1
