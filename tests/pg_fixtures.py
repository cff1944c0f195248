"""A real PostgreSQL server for the test session and a fresh schema per test (fixtures
``pg_server`` and ``pg_url``, loaded for every test directory by the root conftest).

The server is started from the installed binaries (``/usr/lib/postgresql/*/bin``, else ``initdb``
on PATH). initdb refuses to run as root, so under root the server runs as the ``postgres`` system
user (created as ``stateward-pg`` with useradd when there is none). With ``STATEWARD_TEST_PG_URL``
already set, that server (database) is used instead and nothing is started. Missing binaries fail
the tests with the install command: the PostgreSQL tier is never skipped.

Each test works in its own new schema (``search_path`` set in its URL) of one session database:
as isolated as a database per test, and several times faster to create.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

INSTALL_HINT = "apt-get install -y postgresql   (or ./scripts/dev setup, which installs it)"
URL_ENV = "STATEWARD_TEST_PG_URL"
SERVER_USER = "stateward-pg"


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.parent.name.split(".") if p.isdigit())


def find_pg_bin() -> Path | None:
    """The newest server binaries under /usr/lib/postgresql/*/bin, else the directory of ``initdb`` on PATH."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    for bin_dir in candidates:
        if all((bin_dir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bin_dir
    return None


def _server_account() -> pwd.struct_passwd | None:
    """Who runs the server: ourselves unless root, which initdb refuses; then ``postgres`` or a new user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", SERVER_USER):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(SERVER_USER)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A throwaway PostgreSQL cluster: trust auth on 127.0.0.1, durability off for speed."""

    bin_dir: Path | None
    url: str = ""
    admin_url: str = ""
    _root: Path | None = None
    _account: pwd.struct_passwd | None = None
    _names: Iterator[int] = field(default_factory=itertools.count)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.bin_dir is not None and self._root is not None
        kwargs: dict[str, Any] = {}
        if self._account is not None:
            kwargs = {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        return subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            cwd=self._root,
            env=env,
            timeout=120,
            **kwargs,
        )

    def start(self) -> None:
        self._account = _server_account()
        self._root = Path(tempfile.mkdtemp(prefix="stateward-pg-"))
        if self._account is not None:
            os.chown(self._root, self._account.pw_uid, self._account.pw_gid)
        data = self._root / "data"
        init = self._run(
            "initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        for _ in range(5):
            port = _free_port()
            options = (
                f"-p {port} -h 127.0.0.1 -k {self._root} -F -c synchronous_commit=off -c full_page_writes=off"
                " -c max_connections=300"
            )
            log = self._root / "server.log"
            up = self._run("pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
            if up.returncode == 0:
                self.admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
                return
        log_text = log.read_text() if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start:\n{up.stdout}\n{up.stderr}\n{log_text[-2000:]}")

    def stop(self) -> None:
        if self._root is None:
            return
        self._run("pg_ctl", "-D", str(self._root / "data"), "-m", "immediate", "stop")
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def create_session_database(self) -> None:
        """The database the tests' schemas live in; its default collation is not byte order, as on many servers."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            try:
                conn.execute(
                    "CREATE DATABASE stateward_test TEMPLATE template0 ENCODING 'UTF8'"
                    " LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"
                )
            except psycopg.Error:  # a server built without ICU: its default collation will do
                conn.execute("CREATE DATABASE stateward_test TEMPLATE template0 ENCODING 'UTF8'")
        self.url = self.admin_url.rsplit("/", 1)[0] + "/stateward_test"

    def new_schema(self) -> str:
        """A URL whose every connection works in a new, empty schema (a fresh database in all but name)."""
        import psycopg

        name = f"t_{os.getpid()}_{next(self._names)}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}{'&' if '?' in self.url else '?'}options=-csearch_path%3D{name}"

    def drop_schema(self, url: str) -> None:
        import psycopg

        name = url.rsplit("%3D", 1)[1]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server; its database URL is also in STATEWARD_TEST_PG_URL for subprocesses."""
    external = os.environ.get(URL_ENV)
    if external:
        yield PgServer(bin_dir=None, url=external)
        return
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found under /usr/lib/postgresql/*/bin"
            f" or on PATH. Install them with: {INSTALL_HINT}",
            pytrace=False,
        )
    server = PgServer(bin_dir=bin_dir)
    try:
        server.start()
        server.create_session_database()
    except Exception as exc:
        server.stop()
        pytest.fail(f"could not start a PostgreSQL test server from {bin_dir}: {exc}", pytrace=False)
    os.environ[URL_ENV] = server.url
    try:
        yield server
    finally:
        os.environ.pop(URL_ENV, None)
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A URL of an empty schema created for this test alone, dropped afterwards."""
    url = pg_server.new_schema()
    yield url
    pg_server.drop_schema(url)
