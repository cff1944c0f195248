"""pytest fixtures for testing agents on stateward, registered through the ``pytest11`` entry point.

Installed with stateward, so a user's test file needs no import::

    def test_my_agent(stateward_runtime, scripted_model):
        model = scripted_model(lambda request: {"type": "FINISH", "reason": "done"})
        run = stateward_runtime.start(Agent("a", ReActController(model), ToolRegistry([])), goal="...")
        assert run.status is RunStatus.COMPLETED
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stateward.models.scripted import Policy, ScriptedModel
from stateward.runtime.runtime import Runtime
from stateward.testing import temporary_runtime


@pytest.fixture
def stateward_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """A Runtime on a fresh SQLite store in the test's temporary directory, closed afterwards."""
    runtime = temporary_runtime(tmp_path)
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture
def scripted_model() -> Callable[[Policy], ScriptedModel]:
    """Make a ScriptedModel from a policy (see :class:`~stateward.models.scripted.ScriptedModel` for the
    request it is given)."""

    def make(policy: Policy) -> ScriptedModel:
        return ScriptedModel(policy)

    return make
