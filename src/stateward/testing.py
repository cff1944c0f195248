"""Fakes that ship with stateward, so users test their agents the way we test ours."""

from __future__ import annotations

from pathlib import Path

from stateward.models.recording import RecordingModel, ReplayModel
from stateward.models.scripted import AsyncScriptedModel, ScriptedModel
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore
from stateward.tools.memory_store import InMemoryGatewayStore

__all__ = (
    "AsyncScriptedModel",
    "InMemoryGatewayStore",
    "RecordingModel",
    "ReplayModel",
    "ScriptedModel",
    "temporary_runtime",
)


def temporary_runtime(directory: str | Path) -> Runtime:
    """A Runtime on a fresh SQLite file inside ``directory`` (e.g. pytest's ``tmp_path``)."""
    return Runtime(SQLiteStore(Path(directory) / "stateward-test.db"))
