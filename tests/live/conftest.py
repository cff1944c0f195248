"""A real model for the live tier: llama.cpp's llama-server with SmolLM2-135M-Instruct on 127.0.0.1.

Started once per session on a free port and stopped by its PID at teardown. A missing install is a
failure, not a skip: ``scripts/install_live_model.sh`` (run by ``./scripts/dev setup``) installs both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stateward.models.local_server import LocalServer, start_local_server

# Small bounds keep a 135M model on 2 cores fast; they are the same knobs a user sets by environment.
MAX_STRING = 80
MAX_TOKENS = 320


@pytest.fixture(scope="session")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    server = start_local_server(log_path=log)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def live_env(local_model: LocalServer, monkeypatch: pytest.MonkeyPatch) -> LocalServer:
    """Point ``model_from_spec`` (and so ``build_agent(model_spec=...)``) at the local server."""
    monkeypatch.setenv("STATEWARD_OPENAI_BASE_URL", local_model.openai_url)
    monkeypatch.setenv("STATEWARD_ANTHROPIC_BASE_URL", local_model.url)
    monkeypatch.setenv("STATEWARD_MODEL_MAX_STRING", str(MAX_STRING))
    monkeypatch.setenv("STATEWARD_MODEL_MAX_TOKENS", str(MAX_TOKENS))
    monkeypatch.setenv("STATEWARD_MODEL_TEMPERATURE", "0")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "STATEWARD_MODEL_RECORD", "STATEWARD_OPENAI_MODE"):
        monkeypatch.delenv(name, raising=False)
    return local_model
