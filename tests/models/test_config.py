"""Model specs and environment configuration; keys come only from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateward.core.errors import UserError
from stateward.models.anthropic import AnthropicModel
from stateward.models.config import model_from_spec, parse_spec
from stateward.models.openai_compat import OpenAICompatibleModel
from stateward.models.recording import RecordingModel, ReplayModel
from stateward.models.retrying import RetryingModel


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("openai:gpt-4o-mini", ("openai", None, "gpt-4o-mini")),
        ("openai+json:qwen2.5:7b", ("openai", "json_schema", "qwen2.5:7b")),
        ("anthropic+json_schema:claude-x", ("anthropic", "json_schema", "claude-x")),
        ("replay:/tmp/r.jsonl", ("replay", None, "/tmp/r.jsonl")),
    ],
)
def test_specs_parse(spec: str, parsed: tuple[str, str | None, str]) -> None:
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "cohere:command", "openai+xml:m", "replay+json:x"])
def test_bad_specs_are_named(spec: str) -> None:
    with pytest.raises(UserError) as err:
        parse_spec(spec)
    assert err.value.code == "INVALID_MODEL_SPEC"


def test_a_missing_key_names_the_variable_never_a_value() -> None:
    with pytest.raises(UserError) as err:
        model_from_spec("openai:gpt-4o-mini", env={})
    assert err.value.code == "MISSING_API_KEY" and "OPENAI_API_KEY" in err.value.message
    with pytest.raises(UserError) as err:
        model_from_spec("anthropic:claude-x", env={"STATEWARD_ANTHROPIC_API_KEY_ENV": "MY_KEY"})
    assert "MY_KEY" in err.value.message


def test_environment_selects_url_key_mode_and_wrappers(tmp_path: Path) -> None:
    env = {
        "STATEWARD_OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "OPENAI_BASE_URL": "http://ignored/v1",
        "OPENAI_API_KEY": "sk-secret-123",
        "STATEWARD_OPENAI_MODE": "json_schema",
        "STATEWARD_MODEL_MAX_TOKENS": "256",
        "STATEWARD_MODEL_MAX_STRING": "90",
        "STATEWARD_MODEL_PRICES": '{"m": [1.0, 2.0]}',
        "STATEWARD_MODEL_RECORD": str(tmp_path / "rec.jsonl"),
    }
    model = model_from_spec("openai:m", env=env)
    assert isinstance(model, RecordingModel) and isinstance(model.inner, RetryingModel)
    inner = model.inner.inner
    assert isinstance(inner, OpenAICompatibleModel)
    assert (inner.mode, inner.max_tokens, inner.max_string, inner.prices) == ("json_schema", 256, 90, {"m": (1.0, 2.0)})
    assert str(inner._client.base_url).startswith("http://127.0.0.1:1/v1")
    assert "sk-secret-123" not in repr(inner)
    # The spec's +mode wins over the environment.
    tools = model_from_spec(
        "openai+json:m", env={**env, "STATEWARD_OPENAI_MODE": "tools", "STATEWARD_MODEL_RECORD": ""}
    )
    assert isinstance(tools, RetryingModel) and isinstance(tools.inner, OpenAICompatibleModel)
    assert tools.inner.mode == "json_schema"
    # ... and over the mode a caller passes: the spec is what the person wrote for this model.
    argued = model_from_spec("openai+json:m", mode="tools", env={**env, "STATEWARD_MODEL_RECORD": ""})
    assert isinstance(argued, RetryingModel) and isinstance(argued.inner, OpenAICompatibleModel)
    assert argued.inner.mode == "json_schema"


def test_a_local_server_needs_no_key() -> None:
    model = model_from_spec("anthropic+json:local", env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"})
    assert isinstance(model, RetryingModel) and isinstance(model.inner, AnthropicModel)
    assert model.inner.mode == "json"


def test_replay_spec(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("")
    assert isinstance(model_from_spec(f"replay:{path}", env={}), ReplayModel)
    with pytest.raises(UserError) as err:
        model_from_spec(f"replay:{tmp_path / 'missing.jsonl'}", env={})
    assert err.value.code == "RECORDING_NOT_FOUND"


def test_the_reply_size_limit_comes_from_the_environment() -> None:
    base = {"STATEWARD_OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
    for env, expected in [({}, 65_536), ({"STATEWARD_MODEL_MAX_REPLY_BYTES": "1000"}, 1000)]:
        model = model_from_spec("openai:m", env={**base, **env})
        assert isinstance(model, RetryingModel) and isinstance(model.inner, OpenAICompatibleModel)
        assert model.inner.max_reply_bytes == expected
    env = {"STATEWARD_ANTHROPIC_BASE_URL": "http://127.0.0.1:1", "STATEWARD_MODEL_MAX_REPLY_BYTES": "0"}
    unlimited = model_from_spec("anthropic:m", env=env)
    assert isinstance(unlimited, RetryingModel) and isinstance(unlimited.inner, AnthropicModel)
    assert unlimited.inner.max_reply_bytes is None
