"""/docs (switched on) in a real Chromium: Swagger UI renders every operation from local files under the
strict CSP, with no CSP violation and no request to another origin."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

from stateward.api import ApiSettings, create_app
from stateward.runtime.runtime import Runtime
from stateward.store.sqlite import SQLiteStore

pytestmark = pytest.mark.browser


@pytest.fixture
def docs_url(tmp_path: Path) -> Iterator[str]:
    runtime = Runtime(SQLiteStore(tmp_path / "docs.db"))
    app = create_app(runtime, ApiSettings(docs=True))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    runtime.close()


def test_swagger_ui_renders_every_operation_under_the_strict_csp(docs_url: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        console: list[str] = []
        origins: set[str] = set()
        page.on("console", lambda m: console.append(m.text))
        page.on("request", lambda r: origins.add(r.url.split("/")[2]))
        page.add_init_script(
            "document.addEventListener('securitypolicyviolation',"
            " e => console.log('CSP-VIOLATION ' + e.violatedDirective))"
        )
        page.goto(f"{docs_url}/docs")
        page.wait_for_selector(".opblock", timeout=20_000)
        operations = page.locator(".opblock").count()
        browser.close()
    with urllib.request.urlopen(f"{docs_url}/openapi.json") as response:
        paths = len(json.loads(response.read())["paths"])
    assert operations >= paths > 0
    assert not [m for m in console if "CSP-VIOLATION" in m or "Content Security Policy" in m], console
    assert origins == {docs_url.split("/")[2]}
