"""#31 item 7: /docs and /redoc are off by default; when the operator turns /docs on, it is served from
local files under the inbox's strict Content-Security-Policy (no CDN, no inline script)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stateward.api import ApiSettings, create_app
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    runtime = Runtime(SQLiteStore(tmp_path / "api.db"))
    yield runtime
    runtime.close()


def test_docs_and_redoc_are_absent_by_default(runtime: Runtime) -> None:
    with TestClient(create_app(runtime, ApiSettings())) as client:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert client.get(path).status_code == 404, path
        assert client.get("/openapi.json").status_code == 200  # the schema itself stays (no data in it)


def test_docs_when_switched_on_are_local_and_under_the_strict_csp(runtime: Runtime) -> None:
    with TestClient(create_app(runtime, ApiSettings(docs=True))) as client:
        page = client.get("/docs")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
        assert page.headers["x-frame-options"] == "DENY"
        html = page.text
        assert "http://" not in html and "https://" not in html and "//cdn" not in html
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "no inline script"
        assert "<style" not in html and "style=" not in html
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith("/docs/assets/") for s in sources)
        for source in sources:
            asset = client.get(source)
            assert asset.status_code == 200 and len(asset.content) > 100, source
            assert "content-security-policy" in asset.headers
        assert client.get("/docs/assets/index.html").status_code == 404  # only the three files are served
        assert client.get("/redoc").status_code == 404  # no local assets for ReDoc: it stays off
