from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stateward import Runtime
from stateward.store.sqlite import SQLiteStore

pytest_plugins = ["pg_fixtures", "temporal_fixtures"]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "stateward.db"


@pytest.fixture
def runtime(db_path: Path) -> Iterator[Runtime]:
    rt = Runtime(SQLiteStore(db_path))
    yield rt
    rt.close()
