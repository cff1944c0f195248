"""A real service (uvicorn over TLS, in a thread), a real worker (a thread on its own store connection)
and a real headless Chromium driven by Playwright: the inbox as a person uses it.

Chromium is Debian's (``/usr/bin/chromium``, installed by ``./scripts/dev setup``): Playwright's own
browser download is not used. The service speaks HTTPS with a throwaway self-signed certificate, so
the session cookie is exactly what production sets (``__Host-`` prefix, Secure, HttpOnly, SameSite).
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.api.agents_for_api import agents

from stateward.api import ApiSettings, create_app, mint_key
from stateward.api.app import key_store
from stateward.runtime.runtime import Runtime
from stateward.runtime.worker import Worker
from stateward.store.sqlite import SQLiteStore

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` valid for a day, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    """The service's address, its runtime (to mint keys and start runs as an operator would) and the browser."""

    base: str
    runtime: Runtime
    browser: Any
    console: list[str] = field(default_factory=list)

    def key(self, tenant: str, *roles: str, name: str = "alice") -> tuple[str, str]:
        """(token, key id) of a new key."""
        record, token = mint_key(
            key_store(self.runtime), tenant=tenant, name=name, roles=roles, now=dt.datetime.now(dt.UTC)
        )
        return token, record.key_id

    def waiting_run(self, agent: str = "payer", tenant: str = "acme", **params: Any) -> str:
        """A run started as a submitter would; the worker (or this call) drives it to its wait."""
        state = self.runtime.submit(self.runtime.agents.create(agent, params), f"{agent} goal", tenant=tenant)
        self.runtime.drive(state.run_id)  # whoever gets the lease first drives it
        return self.wait_for(state.run_id, "WAITING_FOR_USER")

    def wait_for(self, run_id: str, status: str) -> str:
        deadline = time.monotonic() + 20
        while (now := self.runtime.get(run_id).status.value) != status:
            assert time.monotonic() < deadline, f"{run_id} is {now}, not {status}"
            time.sleep(0.05)
        return run_id

    def page(self) -> Any:
        """A new page in its own browser context (its own cookies), console messages collected."""
        context = self.browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        page.on("console", lambda message: self.console.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))
        return page

    def sign_in(self, page: Any, token: str) -> None:
        page.goto(f"{self.base}/inbox")
        assert "/inbox/login" in page.url
        page.fill("#api_key", token)
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.base}/inbox")


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test's thread, not the main one
        pass


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    sync_api = pytest.importorskip("playwright.sync_api")
    assert CHROMIUM.exists(), "no /usr/bin/chromium: run ./scripts/dev setup (apt-get install chromium)"
    db = tmp_path / "inbox.db"
    runtime = Runtime(SQLiteStore(db), agents=agents)
    worker = Worker(Runtime(SQLiteStore(db), agents=agents), poll_s=0.05, expire_every_s=1.0)
    worker_thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    cert, key = self_signed(tmp_path)
    port = free_port()
    app = create_app(runtime, ApiSettings(inbox_poll_s=0.3))
    server = _Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="warning"
        )
    )
    server_thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    server_thread.start()
    worker_thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the service did not start in 30 s"
        time.sleep(0.05)
    playwright = sync_api.sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield Deployment(base=f"https://localhost:{port}", runtime=runtime, browser=browser)
    finally:
        browser.close()
        playwright.stop()
        server.should_exit = True
        worker.stop.set()
        server_thread.join(timeout=15)
        worker_thread.join(timeout=15)
        worker.runtime.close()
        runtime.close()
