"""Where a Temporal backend is, from its URL, and how this process proves itself to it: no network needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateward.core.errors import ErrorCode, UserError
from stateward.temporal.connection import API_KEY_ENV, TLS_ENV, Credentials
from stateward.temporal.target import TemporalTarget


def test_a_url_names_host_port_namespace_queue_and_tls() -> None:
    target = TemporalTarget.parse("temporal://ns.a1b2.tmprl.cloud:7233/ns.a1b2?task_queue=refunds&tls=true")
    assert (target.address, target.namespace, target.task_queue, target.tls) == (
        "ns.a1b2.tmprl.cloud:7233",
        "ns.a1b2",
        "refunds",
        True,
    )
    assert TemporalTarget.parse(target.url) == target
    plain = TemporalTarget.parse("temporal://localhost")
    assert (plain.port, plain.namespace, plain.task_queue, plain.tls) == (7233, "default", "stateward", False)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://localhost/x",
        "temporal://",
        "temporal://host:99999",
        "temporal://host/a/b",
        "temporal://host/ns?queue=x",
        "temporal://host/ns?task_queue=",
        "temporal://host/ns?tls=maybe",
        "temporal://user:secret@host/ns",
    ],
)
def test_a_url_it_cannot_use_is_a_configuration_error(url: str) -> None:
    with pytest.raises(UserError) as refused:
        TemporalTarget.parse(url)
    assert refused.value.code is ErrorCode.CONFIGURATION_ERROR
    assert "secret" not in refused.value.message


def test_credentials_come_from_the_environment_and_never_go_in_clear(tmp_path: Path) -> None:
    assert Credentials.from_env({}).tls(False) is False
    assert Credentials.from_env({}).tls(True) is True
    keyed = Credentials.from_env({API_KEY_ENV: "k-123"})
    assert keyed.api_key == "k-123" and keyed.tls(False) is True  # an API key is never sent without TLS
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(b"CERT")
    key.write_bytes(b"KEY")
    tls = Credentials.from_env({TLS_ENV["cert"]: str(cert), TLS_ENV["key"]: str(key)}).tls(False)
    assert not isinstance(tls, bool) and (tls.client_cert, tls.client_private_key) == (b"CERT", b"KEY")
    with pytest.raises(UserError) as half:
        Credentials.from_env({TLS_ENV["cert"]: str(cert)})
    assert half.value.code is ErrorCode.CONFIGURATION_ERROR
    with pytest.raises(UserError) as missing:
        Credentials.from_env({TLS_ENV["ca"]: str(tmp_path / "nope.pem")})
    assert missing.value.code is ErrorCode.CONFIGURATION_ERROR
