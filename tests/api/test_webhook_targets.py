"""Where webhooks may go, through HTTP against the real app: the URL is normalised and its host resolved and
checked at subscription and at every delivery; a delivery connects to the address checked; one bad row never
stops a round; tenants read reasons, never addresses or ports.

No test sends traffic anywhere but loopback: names resolve through a stub resolver (the service's resolver is
injected), refusals are made before any connection, and the receivers listen on 127.0.0.1.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from ipaddress import ip_network
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.api.agents_for_api import agents
from tests.api.conftest import Service
from tests.api.receiver import Receiver

from stateward.api import ApiSettings, create_app
from stateward.api.webhook_routes import webhook_store
from stateward.api.webhook_targets import TargetPolicy, WebhookTargetError, check_target
from stateward.api.webhooks import WebhookDispatcher
from stateward.core.errors import UserError
from stateward.runtime.runtime import Runtime
from stateward.store.backends import open_store
from stateward.store.outbox import WebhookSubscription

PUBLIC = "93.184.216.34"  # never connected to: every test that resolves to it is refused or never delivers


class StubDns:
    """The service's resolver in these tests: names map to what the test says, and every lookup is counted."""

    def __init__(self) -> None:
        self.names: dict[str, list[str]] = {}
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.names[host]


class Hooks:
    """A service whose webhook rules are ``policy`` (with the stub resolver), and a dispatcher with the same."""

    def __init__(self, tmp_path: Path, dns: StubDns, *, allow_http: bool, networks: tuple[str, ...], store: str = ""):
        self.dns = dns
        self.policy = TargetPolicy(
            allow_http=allow_http, allow_networks=tuple(ip_network(n) for n in networks), resolver=dns
        )
        self.runtime = Runtime(open_store(store or str(tmp_path / "hooks.db")), agents=agents)
        self.client = TestClient(create_app(self.runtime, ApiSettings(webhook_targets=self.policy)))
        self.service = Service(self.runtime, self.client)
        self.admin = self.service.key("acme", "admin")
        self.dispatcher = WebhookDispatcher(webhook_store(self.runtime), targets=self.policy)

    def subscribe(self, url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
        made = self.client.post("/v1/webhooks", json={"url": url}, headers=headers or self.admin)
        return made.status_code, dict(made.json())

    def deliveries(self, headers: dict[str, str] | None = None) -> list[dict[str, object]]:
        listed = self.client.get("/v1/webhooks/deliveries", headers=headers or self.admin)
        assert listed.status_code == 200, listed.text
        return list(listed.json()["deliveries"])

    def close(self) -> None:
        self.dispatcher.close()
        self.client.close()
        self.runtime.close()


@pytest.fixture
def dns() -> StubDns:
    return StubDns()


@pytest.fixture
def strict(tmp_path: Path, dns: StubDns) -> Iterator[Hooks]:
    """The default rules: https only, no network opened."""
    hooks = Hooks(tmp_path, dns, allow_http=False, networks=())
    yield hooks
    hooks.close()


@pytest.fixture
def loopback(tmp_path: Path, dns: StubDns) -> Iterator[Hooks]:
    """The operator opened http and loopback (where the tests' receivers listen)."""
    hooks = Hooks(tmp_path, dns, allow_http=True, networks=("127.0.0.0/8",))
    yield hooks
    hooks.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


FORBIDDEN_LITERALS = [
    "https://127.0.0.1/hook",
    "https://0.0.0.0/hook",
    "https://169.254.169.254/latest/meta-data/",
    "https://10.1.2.3/hook",
    "https://172.16.0.1/hook",
    "https://192.168.1.1/hook",
    "https://100.64.0.1/hook",
    "https://192.0.2.1/hook",
    "https://198.51.100.7/hook",
    "https://203.0.113.9/hook",
    "https://198.18.0.1/hook",
    "https://224.0.0.251/hook",
    "https://239.255.255.250/hook",
    "https://240.0.0.1/hook",
    "https://255.255.255.255/hook",
    "https://[::1]/hook",
    "https://[::]/hook",
    "https://[0:0:0:0:0:0:0:1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[::ffff:7f00:1]/hook",
    "https://[::ffff:169.254.169.254]/hook",
    "https://[::127.0.0.1]/hook",
    "https://[64:ff9b::7f00:1]/hook",
    "https://[64:ff9b::a9fe:a9fe]/hook",
    "https://[2002:7f00:1::]/hook",
    "https://[2001::1]/hook",
    "https://[2001:db8::1]/hook",
    "https://[fe80::1]/hook",
    "https://[fc00::1]/hook",
    "https://[fd12:3456::1]/hook",
    "https://[fec0::1]/hook",
    "https://[ff02::1]/hook",
]


# Spellings inet_aton reads as loopback: the schema refuses them (only dotted quads are addresses), and the
# target rules read them as the addresses they spell wherever a URL comes from (a row stored before).
ODD_SPELLINGS = ["https://127.1/hook", "https://0x7f.1/hook", "https://0x7f000001/hook", "https://2130706433/hook",
                 "https://0177.0.0.1/hook", "https://0/hook", "https://017700000001/hook"]  # fmt: skip


@pytest.mark.parametrize("url", FORBIDDEN_LITERALS + ODD_SPELLINGS)
def test_every_loopback_private_and_reserved_spelling_is_refused_at_subscription(strict: Hooks, url: str) -> None:
    status, body = strict.subscribe(url)
    code = "INVALID_REQUEST" if url in ODD_SPELLINGS else "WEBHOOK_TARGET_FORBIDDEN"
    assert (status, body["error"]["code"]) == (422, code), body  # type: ignore[index]
    assert strict.client.get("/v1/webhooks", headers=strict.admin).json() == {"webhooks": []}
    with pytest.raises(WebhookTargetError) as refused:
        check_target(url, strict.policy)
    assert refused.value.code == "WEBHOOK_TARGET_FORBIDDEN"


@pytest.mark.parametrize(
    "answer",
    [["127.0.0.1"], ["169.254.169.254"], ["10.0.0.5"], ["::1"], ["fe80::1%eth0"], [PUBLIC, "127.0.0.1"]],
    ids=["loopback", "metadata", "private", "v6-loopback", "v6-link-local-zone", "one-bad-among-public"],
)
def test_a_name_is_refused_for_any_address_it_resolves_to(strict: Hooks, answer: list[str]) -> None:
    strict.dns.names["hooks.acme.example"] = answer
    status, body = strict.subscribe("https://hooks.acme.example/in")
    assert (status, body["error"]["code"]) == (422, "WEBHOOK_TARGET_FORBIDDEN"), body  # type: ignore[index]
    assert strict.dns.lookups == ["hooks.acme.example"]


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.acme.example/in\r\nX-Injected: 1",
        "https://hooks.acme.example/in\nx",
        "https://hooks.acme.example/\x00",
        "https://hooks.acme.example/a\tb",
        "https://hooks.acme.example/\u202egnp",
        "https://user:pass@hooks.acme.example/in",
        "https://hooks.acme.example@127.0.0.1/in",
        "https://hooks.acme.example:0/in",
        "https://hooks.acme.example:70000/in",
        "https://[fe80::1%25eth0]/in",
        "https://999.1.1.1/in",
        "https://hooks..example/in",
        "https:///in",
        "gopher://hooks.acme.example/",
        "https://hooks.acme.example/" + "a" * 2100,
    ],
)
def test_malformed_urls_are_refused_by_name_before_any_lookup(strict: Hooks, url: str) -> None:
    strict.dns.names["hooks.acme.example"] = [PUBLIC]
    status, body = strict.subscribe(url)
    assert status == 422, body
    assert body["error"]["code"] in ("WEBHOOK_URL_INVALID", "INVALID_REQUEST", "INVALID_TEXT"), body  # type: ignore[index]
    assert strict.dns.lookups == []


def test_http_is_refused_unless_the_operator_allows_it(strict: Hooks) -> None:
    strict.dns.names["hooks.acme.example"] = [PUBLIC]
    status, body = strict.subscribe("http://hooks.acme.example/in")
    assert (status, body["error"]["code"]) == (422, "WEBHOOK_TARGET_FORBIDDEN")  # type: ignore[index]
    assert "STATEWARD_WEBHOOK_ALLOW_HTTP" in body["error"]["message"]  # type: ignore[index]


def test_a_public_url_is_stored_normalised_and_an_unknown_name_is_named(strict: Hooks) -> None:
    strict.dns.names["hooks.acme.example"] = [PUBLIC]
    status, made = strict.subscribe("HTTPS://Hooks.ACME.example.:443/in/%C3%A9?x=1#fragment")
    assert status == 201, made
    assert made["url"] == "https://hooks.acme.example/in/%C3%A9?x=1"
    status, body = strict.subscribe("https://nowhere.acme.example/in")
    assert (status, body["error"]["code"]) == (422, "WEBHOOK_DNS_FAILED")  # type: ignore[index]


def test_a_name_that_turns_private_after_subscription_is_refused_at_delivery(strict: Hooks) -> None:
    strict.dns.names["hooks.acme.example"] = [PUBLIC]
    assert strict.subscribe("https://hooks.acme.example/in")[0] == 201
    strict.service.waiting_run(strict.admin)
    strict.dns.names["hooks.acme.example"] = ["127.0.0.1"]  # rebound after the check at subscription
    assert strict.dispatcher.deliver_due() == 0
    [delivery] = strict.deliveries()
    assert (delivery["status"], delivery["error_code"]) == ("failed", "WEBHOOK_TARGET_FORBIDDEN")
    assert "127.0.0.1" not in str(delivery["last_error"])


def test_a_delivery_connects_to_the_address_it_checked_with_the_name_as_host(
    loopback: Hooks, receiver: Receiver
) -> None:
    port = receiver.server.server_address[1]
    loopback.dns.names["receiver.acme.test"] = ["127.0.0.1"]  # no other resolver knows this name
    status, made = loopback.subscribe(f"http://receiver.acme.test:{port}/hook")
    assert status == 201, made
    loopback.service.waiting_run(loopback.admin)
    loopback.dns.lookups.clear()
    assert loopback.dispatcher.deliver_due() == 1
    assert loopback.dns.lookups == ["receiver.acme.test"]  # checked again at delivery, resolved once
    [(headers, _)] = receiver.received
    assert headers["host"] == f"receiver.acme.test:{port}"


def test_a_redirect_is_not_followed(loopback: Hooks, receiver: Receiver) -> None:
    other = Receiver()
    try:
        receiver.status, receiver.headers = 307, {"Location": other.url}
        assert loopback.subscribe(receiver.url)[0] == 201
        loopback.service.waiting_run(loopback.admin)
        assert loopback.dispatcher.deliver_due() == 0
        assert other.received == []
        [delivery] = loopback.deliveries()
        assert delivery["error_code"] == "WEBHOOK_REDIRECT_REFUSED"
    finally:
        other.close()


def test_a_connection_failure_is_reported_without_address_or_port(loopback: Hooks) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert loopback.subscribe(f"http://127.0.0.1:{port}/hook")[0] == 201
    loopback.service.waiting_run(loopback.admin)
    assert loopback.dispatcher.deliver_due() == 0
    [delivery] = loopback.deliveries()
    assert delivery["status"] == "pending" and delivery["error_code"] == "WEBHOOK_CONNECT_FAILED"
    assert str(port) not in str(delivery["last_error"]) and "127.0.0.1" not in str(delivery["last_error"])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def loopback_on_each_store(request: pytest.FixtureRequest, tmp_path: Path, dns: StubDns) -> Iterator[Hooks]:
    store = "" if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    hooks = Hooks(tmp_path, dns, allow_http=True, networks=("127.0.0.0/8",), store=store)
    yield hooks
    hooks.close()


@pytest.mark.parametrize("bad_url", ["http://127.0.0.1:1/a\r\nb", "http://127.0.0.1:1/\x00", "ftp://x/"])
def test_one_tenants_bad_row_is_failed_and_every_other_tenant_is_delivered_in_the_same_round(
    loopback_on_each_store: Hooks, receiver: Receiver, bad_url: str
) -> None:
    loopback = loopback_on_each_store
    if "\x00" in bad_url and "postgres" in type(loopback.runtime.store).__name__.lower():
        pytest.skip("PostgreSQL cannot store a NUL: such a row cannot exist there")
    # A row stored before URLs were checked (or written around the API): the round must survive it.
    webhook_store(loopback.runtime).add_webhook(
        WebhookSubscription(
            subscription_id="wh_old", tenant="acme", url=bad_url, secret="whsec_x", kinds=("run.waiting",), created_at=0
        )
    )
    globex = loopback.service.key("globex", "admin")
    assert loopback.subscribe(receiver.url, headers=globex)[0] == 201
    loopback.service.waiting_run(loopback.admin)
    loopback.service.waiting_run(globex)
    assert loopback.dispatcher.deliver_due() == 1
    assert len(receiver.received) == 1
    [bad] = loopback.deliveries()
    assert (bad["status"], bad["attempts"], bad["error_code"]) == ("failed", 1, "WEBHOOK_URL_INVALID")
    [good] = loopback.deliveries(globex)
    assert good["status"] == "delivered"


def test_http_and_networks_are_the_operators_to_open() -> None:
    policy = TargetPolicy.from_env(
        {"STATEWARD_WEBHOOK_ALLOW_HTTP": "1", "STATEWARD_WEBHOOK_ALLOW_NETWORKS": "10.1.0.0/16, fd00::/8"}
    )
    assert policy.allow_http and policy.allow_networks == (ip_network("10.1.0.0/16"), ip_network("fd00::/8"))
    assert TargetPolicy.from_env({}) == TargetPolicy()
    assert not TargetPolicy().allow_http and TargetPolicy().allow_networks == ()
    for env in ({"STATEWARD_WEBHOOK_ALLOW_NETWORKS": "10.1.0.0/33"}, {"STATEWARD_WEBHOOK_ALLOW_HTTP": "maybe"}):
        with pytest.raises(UserError) as refused:
            TargetPolicy.from_env(env)
        assert refused.value.code == "CONFIGURATION_ERROR"


def test_an_allowed_network_opens_exactly_that_network(tmp_path: Path, dns: StubDns) -> None:
    hooks = Hooks(tmp_path, dns, allow_http=False, networks=("10.1.0.0/16",))
    try:
        assert hooks.subscribe("https://10.1.2.3/in")[0] == 201
        status, body = hooks.subscribe("https://10.2.0.1/in")
        assert (status, body["error"]["code"]) == (422, "WEBHOOK_TARGET_FORBIDDEN")  # type: ignore[index]
    finally:
        hooks.close()


def _self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``name`` (its own issuer) and its key, as PEM files."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.parametrize("served_name", ["receiver.acme.test", "someone-else.test"])
def test_an_https_delivery_pinned_to_the_address_verifies_the_certificate_for_the_name(
    tmp_path: Path, dns: StubDns, receiver: Receiver, served_name: str
) -> None:
    import ssl

    import httpx

    cert, key = _self_signed(tmp_path, served_name)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    receiver.server.socket = server_tls.wrap_socket(receiver.server.socket, server_side=True)
    port = receiver.server.server_address[1]
    hooks = Hooks(tmp_path, dns, allow_http=False, networks=("127.0.0.0/8",))
    trusting = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), trust_env=False, timeout=5)
    hooks.dispatcher = WebhookDispatcher(webhook_store(hooks.runtime), targets=hooks.policy, client=trusting)
    try:
        dns.names["receiver.acme.test"] = ["127.0.0.1"]
        assert hooks.subscribe(f"https://receiver.acme.test:{port}/hook")[0] == 201
        hooks.service.waiting_run(hooks.admin)
        delivered = hooks.dispatcher.deliver_due()
        [delivery] = hooks.deliveries()
        if served_name == "receiver.acme.test":
            assert delivered == 1 and delivery["status"] == "delivered"
            assert receiver.received[0][0]["host"] == f"receiver.acme.test:{port}"
        else:  # a certificate for another name is refused, though the address is the one checked
            assert delivered == 0 and delivery["error_code"] == "WEBHOOK_TLS_FAILED"
            assert receiver.received == []
    finally:
        hooks.close()


def test_serve_takes_the_operators_switches_and_refuses_a_bad_network_by_name(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from stateward.cli.app import app

    result = CliRunner().invoke(
        app, ["serve", "--webhook-allow-network", "10.0.0.0/33", "--db", str(tmp_path / "none.db")]
    )
    assert result.exit_code != 0
    assert "CONFIGURATION_ERROR" in result.output and "STATEWARD_WEBHOOK_ALLOW_NETWORKS" in result.output
