"""One Temporal client on a private event loop: the sync surfaces (the CLI, the facade, the book) call through it.

The SDK's client is async; stateward's operator surfaces are sync. A connection owns its loop, so a command
is one ``run(coro)`` per round trip and nothing here touches a loop the caller may run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from stateward.core.errors import ErrorCode, RunNotFoundError, StoreError, UserError
from stateward.temporal.codec import CODEC_ENV, codec_from_env, data_converter
from stateward.temporal.target import TemporalTarget

T = TypeVar("T")
CONNECT_TIMEOUT = timedelta(seconds=10)
_opened: list[str] = []  # addresses this process connected to (see clients_opened)
RPC_TIMEOUT = timedelta(seconds=30)
_UNDECODABLE = "Unknown payload encoding"  # the SDK's KeyError for a payload no converter of this process reads


API_KEY_ENV = "STATEWARD_TEMPORAL_API_KEY"
TLS_ENV = {
    "cert": "STATEWARD_TEMPORAL_TLS_CERT",
    "key": "STATEWARD_TEMPORAL_TLS_KEY",
    "ca": "STATEWARD_TEMPORAL_TLS_CA",
}


@dataclass(frozen=True)
class Credentials:
    """How this process proves itself to the frontend: an API key (Temporal Cloud) and/or a client certificate
    (mTLS), read from the environment, never from the URL (which is logged and shown)."""

    api_key: str | None = None
    cert: bytes | None = None
    key: bytes | None = None
    ca: bytes | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Credentials:
        """The credentials ``env`` names; CONFIGURATION_ERROR for a file that cannot be read, or half a key pair."""
        files = {part: _read(env, name) for part, name in TLS_ENV.items()}
        if (files["cert"] is None) != (files["key"] is None):
            raise UserError(
                f"{TLS_ENV['cert']} and {TLS_ENV['key']} are set together or not at all",
                code=ErrorCode.CONFIGURATION_ERROR,
            )
        return cls(api_key=env.get(API_KEY_ENV) or None, **files)

    def tls(self, asked: bool) -> TLSConfig | bool:
        """TLS when the URL asks for it, or whenever a certificate or an API key is set (neither goes in clear)."""
        if self.cert is not None or self.ca is not None:
            return TLSConfig(server_root_ca_cert=self.ca, client_cert=self.cert, client_private_key=self.key)
        return asked or self.api_key is not None


def _read(env: Mapping[str, str], name: str) -> bytes | None:
    path = env.get(name)
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{name}: cannot read {path} ({exc.strerror})", code=ErrorCode.CONFIGURATION_ERROR) from None


class Connection:
    """A connected client and the loop it lives on."""

    def __init__(self, target: TemporalTarget, client: Client, loop: asyncio.AbstractEventLoop):
        self.target = target
        self.client = client
        self._loop = loop

    @classmethod
    def open(cls, target: TemporalTarget, codec: PayloadCodec | None = None) -> Connection:
        """Connect to ``target``; STORE_UNAVAILABLE (naming the address) when nothing answers there. Payloads go
        through ``codec``, else through the one ``STATEWARD_TEMPORAL_CODEC`` names, else as JSON."""
        codec = codec if codec is not None else codec_from_env(os.environ)
        loop = asyncio.new_event_loop()
        try:
            client = loop.run_until_complete(_connect(target, codec))
        except BaseException:
            loop.close()
            raise
        _opened.append(target.address)
        return cls(target, client, loop)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine of the client to its end; a payload this process cannot decode (encoded by a codec it
        lacks) is CONFIGURATION_ERROR, naming the encoding."""
        try:
            return self._loop.run_until_complete(work)
        except KeyError as exc:
            said = str(exc.args[0]) if exc.args else ""
            if not said.startswith(_UNDECODABLE):
                raise
            raise UserError(
                f"{said[len(_UNDECODABLE) :].strip()}: a payload this process cannot decode; set {CODEC_ENV} to"
                " the payload codec the namespace's workers use",
                code=ErrorCode.CONFIGURATION_ERROR,
                details={"encoding": said[len(_UNDECODABLE) :].strip()[:100]},
            ) from None

    def handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        """The workflow of run ``run_id`` (its latest execution)."""
        return self.client.get_workflow_handle(run_id)

    def close(self) -> None:
        """Close the loop (the client's channel goes with it)."""
        if not self._loop.is_closed():
            self._loop.close()


async def _connect(target: TemporalTarget, codec: PayloadCodec | None) -> Client:
    credentials = Credentials.from_env(os.environ)
    try:
        return await asyncio.wait_for(
            Client.connect(
                target.address,
                namespace=target.namespace,
                data_converter=data_converter(codec),
                tls=credentials.tls(target.tls),
                api_key=credentials.api_key,
            ),
            CONNECT_TIMEOUT.total_seconds(),
        )
    except (TimeoutError, RuntimeError, OSError) as exc:
        raise StoreError(
            f"no Temporal frontend answers at {target.address} ({exc})"[:500],
            code=ErrorCode.STORE_UNAVAILABLE,
            details={"address": target.address, "namespace": target.namespace},
        ) from None


def not_found(run_id: str, exc: RPCError) -> RunNotFoundError | RPCError:
    """A workflow the server does not know is a run that does not exist; any other RPC failure is itself."""
    if exc.status is RPCStatusCode.NOT_FOUND:
        return RunNotFoundError(f"no run {run_id!r}", details={"run_id": run_id})
    return exc


def clients_opened() -> bool:
    """Whether this process ever connected a Temporal client: its native threads then outlive the interpreter's
    teardown, so a command line ends with ``os._exit`` after flushing (cli/main.py)."""
    return bool(_opened)
