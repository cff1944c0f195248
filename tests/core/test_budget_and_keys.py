"""Budgets end a run at their limit, not one past it; idempotency keys and action digests tell apart
exactly what must be told apart."""

from __future__ import annotations

import hashlib
import json

import pytest

from stateward.core.budget import Budget, Usage, UsageDelta
from stateward.core.canonical import action_digest, canonical_json, idempotency_key, idempotency_key_of


@pytest.mark.parametrize(
    ("limit", "at_limit", "below", "dimension"),
    [
        ({"max_steps": 3}, Usage(steps=3), Usage(steps=2), "steps"),
        ({"max_model_calls": 2}, Usage(model_calls=2), Usage(model_calls=1), "model_calls"),
        ({"max_tool_calls": 2}, Usage(tool_attempts=2), Usage(tool_attempts=1), "tool_calls"),
        ({"max_input_tokens": 100}, Usage(input_tokens=100), Usage(input_tokens=99), "input_tokens"),
        ({"max_output_tokens": 10}, Usage(output_tokens=10), Usage(output_tokens=9), "output_tokens"),
    ],
)
def test_a_limit_is_used_up_when_reached_not_one_past_it(
    limit: dict[str, int], at_limit: Usage, below: Usage, dimension: str
) -> None:
    budget = Budget.model_validate({"max_steps": None, **limit})
    assert budget.exhausted_by(at_limit) == dimension
    assert budget.exhausted_by(below) is None


def test_no_limit_is_never_used_up() -> None:
    assert Budget(max_steps=None).exhausted_by(Usage(steps=10**9)) is None


def test_the_idempotency_key_names_the_run_the_step_the_tool_and_the_arguments() -> None:
    key = idempotency_key("run_a", 1, "pay", {"amount": 5, "to": "x"})
    assert key == idempotency_key("run_a", 1, "pay", {"to": "x", "amount": 5})  # argument order is not identity
    # The same call at a later step is a new payment, not a replay of the first one.
    assert key != idempotency_key("run_a", 2, "pay", {"amount": 5, "to": "x"})
    assert key != idempotency_key("run_b", 1, "pay", {"amount": 5, "to": "x"})
    assert key != idempotency_key("run_a", 1, "refund", {"amount": 5, "to": "x"})
    assert key != idempotency_key("run_a", 1, "pay", {"amount": 6, "to": "x"})


def test_the_idempotency_key_is_the_digest_it_always_was() -> None:
    """Keys are journalled: a resumed run of an earlier version must find its entries under the same key. The
    gateway builds the key from the arguments' canonical JSON it has made already; the result is the SHA-256
    of the whole canonical document, as before."""
    cases = [
        ("run_a", 1, "pay", {"amount": 5, "to": "x"}),
        ("run-ü", 12, "näme", {"z": [1, 2.5, None, True], "a": {"b": 'é\n"q"'}}),
        ("run_c", 0, "noop", {}),
        ("run_d", 3, "noop", None),
    ]
    for run_id, step, tool, args in cases:
        document = json.dumps(
            {"run": run_id, "step": step, "tool": tool, "args": args or {}},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        expected = "idem_" + hashlib.sha256(document.encode()).hexdigest()[:32]
        assert idempotency_key(run_id, step, tool, args) == expected
        assert idempotency_key_of(run_id, step, tool, canonical_json(args or {})) == expected


def test_an_action_digest_binds_the_tool_the_arguments_and_the_plan_version() -> None:
    digest = action_digest("write_draft", {"brief": "brief:v1"}, 1)
    assert digest == action_digest("write_draft", {"brief": "brief:v1"}, 1)
    assert digest != action_digest("write_draft", {"brief": "brief:v2"}, 1)
    assert digest != action_digest("write_draft", {"brief": "brief:v1"}, 2)
    assert digest != action_digest("publish", {"brief": "brief:v1"}, 1)


def test_usage_advances_only_by_a_delta_of_its_own_counters() -> None:
    used = Usage(steps=2, model_calls=3)
    step = UsageDelta(steps=1, model_calls=2) + UsageDelta(tool_attempts=1)
    assert step == UsageDelta(steps=1, model_calls=2, tool_attempts=1)
    assert used.plus(step) == Usage(steps=3, model_calls=5, tool_attempts=1)
    assert used.plus(UsageDelta()) is used  # a write that spends nothing copies nothing
    with pytest.raises(TypeError):
        UsageDelta(stepz=1)
