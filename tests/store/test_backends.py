"""``open_store`` finds a backend by the URL's scheme: the built-in SQLite (a plain path, ``sqlite://``) and
PostgreSQL, a backend an installed package registers under the ``stateward.stores`` entry-point group, or one
registered in-process. An unknown scheme is a named error, and nothing is created for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stateward.core.errors import ErrorCode, UserError
from stateward.store import backends
from stateward.store.backends import ENTRY_POINT_GROUP, open_store, register_backend, scheme_of


def test_a_plain_path_and_a_sqlite_url_open_the_embedded_store(tmp_path: Path) -> None:
    from stateward.store.sqlite import SQLiteStore

    for url in (str(tmp_path / "a.db"), f"sqlite:///{tmp_path / 'b.db'}"):
        store = open_store(url)
        try:
            assert isinstance(store, SQLiteStore)
        finally:
            store.close()
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["a.db", "b.db"]


def test_an_unknown_scheme_is_a_named_error_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as raised:
        open_store("mysql://db.example/runs")
    assert raised.value.code is ErrorCode.UNKNOWN_STORE_SCHEME
    assert raised.value.details == {"scheme": "mysql"}
    assert list(tmp_path.iterdir()) == []  # not taken for a SQLite file named "mysql:"


def test_the_scheme_is_read_case_blind_and_only_before_a_double_slash() -> None:
    assert [scheme_of(u) for u in ("PostgreSQL://h/db", "./runs.db", "C:\\runs.db", "sqlite:///x")] == [
        "postgresql",
        "",
        "",
        "sqlite",
    ]


def _install_entry_point(root: Path, name: str, value: str) -> None:
    """A distribution on ``root`` (as pip would leave it) that registers ``name`` under the stores group."""
    info = root / "fake_store_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-store-backend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {value}\n")


def test_an_installed_package_registers_a_scheme_by_entry_point(tmp_path: Path) -> None:
    """In a fresh interpreter (as a user's process would be): the package's opener gets the URL it names."""
    (tmp_path / "fake_store_backend.py").write_text(
        textwrap.dedent(
            """
            from stateward.store.sqlite import SQLiteStore

            OPENED = []

            def open_memo(url, *, create):
                OPENED.append((url, create))
                return SQLiteStore(url.removeprefix("memo://"), create=create)
            """
        )
    )
    _install_entry_point(tmp_path, "memo", "fake_store_backend:open_memo")
    db = tmp_path / "via-plugin.db"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from stateward.store.backends import open_store
        import fake_store_backend
        store = open_store("memo://{db}")
        print(type(store).__name__, fake_store_backend.OPENED)
        store.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"SQLiteStore [('memo://{db}', True)]"
    assert db.exists()


def test_a_package_cannot_take_over_a_built_in_scheme(tmp_path: Path) -> None:
    (tmp_path / "hijack.py").write_text("def open_any(url, *, create):\n    raise SystemExit('hijacked')\n")
    _install_entry_point(tmp_path, "sqlite", "hijack:open_any")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from stateward.store.backends import open_store
        open_store("sqlite:///{tmp_path / "own.db"}").close()
        print("built-in")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "built-in"


def test_a_backend_registered_in_process_opens_its_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stateward.store.sqlite import SQLiteStore

    monkeypatch.setattr(backends, "_registered", {})
    seen: list[str] = []

    def opener(url: str, *, create: bool) -> SQLiteStore:
        seen.append(url)
        return SQLiteStore(tmp_path / "mine.db", create=create)

    register_backend("Mine", opener)
    open_store("mine://anything").close()
    assert seen == ["mine://anything"]
    with pytest.raises(UserError) as raised:
        register_backend("postgresql", opener)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
