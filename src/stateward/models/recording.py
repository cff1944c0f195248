"""Recording real model exchanges and replaying them offline, deterministically.

A recording is JSONL, one exchange per line: the request's canonical hash, the request, and either the
reply or the named error. Replay looks replies up by that hash, so it depends on what was asked, not
on call order; a request the recording does not contain is a REPLAY_MISS, never a guess.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from stateward.core import bridge
from stateward.core.canonical import canonical_json, sha256_hex
from stateward.core.errors import ErrorCode, UserError
from stateward.core.model_io import DEFAULT_CONTRACTS
from stateward.models.base import AnyModel, AsyncModel, ModelReply, ModelRequest, complete
from stateward.models.errors import (
    AuthFailedError,
    ContextLengthExceededError,
    ModelCallError,
    ModelTimeoutError,
    ProviderError,
    RateLimitedError,
    ReplayMissError,
    ServiceUnavailableError,
)

_ERRORS: dict[str, type[ModelCallError]] = {
    cls.default_code: cls
    for cls in (
        RateLimitedError,
        ServiceUnavailableError,
        ModelTimeoutError,
        AuthFailedError,
        ContextLengthExceededError,
        ProviderError,
        ReplayMissError,
    )
}


def request_key(request: ModelRequest) -> str:
    """Canonical hash of everything the model was shown. A contract that is its purpose's default is left
    out, so recordings made before requests named their contract still answer the same requests."""
    shown = request.model_dump(mode="json")
    if shown.get("contract") in (None, DEFAULT_CONTRACTS.get(request.purpose)):
        shown.pop("contract", None)
    return sha256_hex(canonical_json(shown))


class RecordingModel:
    """Passes calls through to ``inner`` and appends each exchange (errors included) to ``path``.

    Over an inner model with ``acomplete`` it is an AsyncModel too: the same code run in a bridge, the
    inner call awaited natively and the file appended to off the event loop."""

    def __init__(self, inner: AnyModel, path: str | Path):
        self.inner = inner
        self.name = inner.name
        self.path = Path(path)
        self._lock = threading.Lock()
        if isinstance(inner, AsyncModel):  # only then: an AsyncModel is what has an ``acomplete``
            self.acomplete = self._acomplete

    async def _acomplete(self, request: ModelRequest) -> ModelReply:
        return await bridge.run_bridged(self.complete, request)

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True)
        bridge.blocking(lambda: self._write(line))  # a plain call outside a bridge

    def _write(self, line: str) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def complete(self, request: ModelRequest) -> ModelReply:
        """Call the inner model and append the request and its answer (or failure) to the recording."""
        entry: dict[str, Any] = {
            "key": request_key(request),
            "model": self.name,
            "request": request.model_dump(mode="json"),
        }
        try:
            reply = complete(self.inner, request)
        except ModelCallError as exc:
            self._append({**entry, "error": {"code": exc.code, "message": exc.message, "details": exc.details}})
            raise
        self._append({**entry, "reply": reply.model_dump(mode="json")})
        return reply


MAX_RECORDING_BYTES = 16 * 1024 * 1024  # a recording is a few KiB per model call


def _refused(path: Path, why: str) -> UserError:
    return UserError(f"the recording {path.name!r} {why}"[:300], code=ErrorCode.RECORDING_NOT_ALLOWED)


def _read_recording(path: Path, root: str | Path | None, max_bytes: int) -> str:
    """The text of a recording the operator allowed: inside ``root``, a regular file, bounded in size."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UserError(f"no recording at {path}", code=ErrorCode.RECORDING_NOT_FOUND) from None
    if root is not None and not real.is_relative_to(Path(root).resolve()):
        raise _refused(path, "is outside the recordings directory (STATEWARD_REPLAY_DIR)")
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UserError(
            f"cannot read the recording {path.name}: {exc.strerror}", code=ErrorCode.INVALID_RECORDING
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        raise _refused(
            path, "is not a regular file" if not stat.S_ISREG(info.st_mode) else f"is over {max_bytes} bytes"
        )
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _refused(path, f"is over {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"the recording {path.name} is not UTF-8 text", code=ErrorCode.INVALID_RECORDING) from None


class ReplayModel:
    """Plays a recording back. The n-th identical request gets the n-th recorded answer to it (the last
    one once they run out, so a recording of one run can be replayed many times)."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        root: str | Path | None = None,
        max_bytes: int = MAX_RECORDING_BYTES,
    ):
        """``root``: the recording must resolve (symlinks followed) inside this directory; only a regular
        file of at most ``max_bytes`` is read (RECORDING_NOT_ALLOWED otherwise, before any byte is read)."""
        self.path = Path(path)
        self._answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
        recorded_name = None
        text = _read_recording(self.path, root, max_bytes)
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                self._answers[entry["key"]].append(entry)
            except (ValueError, KeyError, TypeError, RecursionError):
                raise UserError(
                    f"{self.path.name} line {number} is not a recorded exchange", code=ErrorCode.INVALID_RECORDING
                ) from None
            recorded_name = recorded_name or entry.get("model")
        self.name = name or f"replay:{recorded_name or self.path.name}"
        self._served: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest) -> ModelReply:
        """Answer from the recording by the request's key; a request it never saw raises ReplayMissError."""
        key = request_key(request)
        answers = self._answers.get(key)
        if not answers:
            raise ReplayMissError(
                f"the recording {self.path.name} has no answer to this {request.purpose!r} request",
                provider="replay",
                details={"request_key": key},
            )
        with self._lock:
            entry = answers[min(self._served[key], len(answers) - 1)]
            self._served[key] += 1
        if "error" in entry:
            err = entry["error"]
            cls = _ERRORS.get(err.get("code", ""), ProviderError)
            details = dict(err.get("details") or {})
            raise cls(
                err.get("message", ""),
                code=ErrorCode.parse(err.get("code")),
                provider=str(details.pop("provider", "replay")),
                status_code=details.pop("status_code", None),
                retry_after_s=details.pop("retry_after_s", None),
                details=details,
            )
        reply = ModelReply.model_validate(entry["reply"])
        code = ErrorCode.parse(reply.rejection_code)
        if code is not None and code.value != reply.rejection_code:  # a renamed code (MAX_TOKENS_REACHED)
            reply = reply.model_copy(update={"rejection_code": code.value})
        return reply
