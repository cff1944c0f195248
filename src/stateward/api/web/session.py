"""Browser sessions of the inbox: a signed, expiring cookie naming the key, never the key itself.

The cookie holds ``{"k": key_id, "c": csrf, "s": session_id}`` signed with the service's secret
(itsdangerous, HMAC SHA-1 over a timestamped payload): a client cannot forge or alter it, and it ends
after ``max_age_s``. Each request looks the key up again, so a revoked key signs its sessions out at
once; signing out records the session's id in the store (:mod:`stateward.store.sessions`) until the
cookie would have expired, so a copied cookie stops working too, across restarts and processes. A
cookie without ``k`` is the anonymous session of the sign-in form: it carries the CSRF token that
form needs. Signing in replaces it (a new token), so a token planted before sign-in is worth nothing;
showing the form keeps a session the browser already has, so no other site can sign a user out by
sending them to it.

Cookies are HttpOnly, SameSite=Lax and, by default, Secure with the ``__Host-`` prefix (no Domain,
Path=/, HTTPS only). ``secure_cookies=False`` is for plain-HTTP development behind nothing.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from stateward.api.identity import Principal
from stateward.core.errors import ErrorCode, UserError
from stateward.store.keys import KeyStore
from stateward.store.sessions import SessionStore

SESSION_SECRET_ENV = "STATEWARD_SESSION_SECRET"
MIN_SECRET_CHARS = 32


def _random_secret() -> str:
    return secrets.token_urlsafe(48)


@dataclass(frozen=True)
class SessionSettings:
    """How browser sessions are signed and how long they last.

    ``secret`` signs every cookie; several service processes behind one address need the same one
    (``STATEWARD_SESSION_SECRET``). Left unset, each process makes its own, so its sessions end with it.
    """

    secret: str = field(default_factory=_random_secret, repr=False)
    max_age_s: int = 8 * 3600
    secure_cookies: bool = True

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_CHARS:
            raise UserError(
                f"the session secret must be at least {MIN_SECRET_CHARS} characters", code=ErrorCode.CONFIGURATION_ERROR
            )
        if self.max_age_s < 60:
            raise UserError("sessions must last at least 60 seconds", code=ErrorCode.CONFIGURATION_ERROR)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SessionSettings:
        """``STATEWARD_SESSION_SECRET`` if set, else a secret of this process alone."""
        env = dict(os.environ) if env is None else env
        secret = env.get(SESSION_SECRET_ENV, "").strip()
        return cls(secret=secret) if secret else cls()

    @property
    def cookie_name(self) -> str:
        return "__Host-stateward" if self.secure_cookies else "stateward_session"


@dataclass(frozen=True)
class Session:
    """One browser's session: the key it signed in with (None before sign-in), its CSRF token, its id
    (what a sign-out revokes) and when its cookie was signed (epoch seconds; 0 before it was)."""

    key_id: str | None
    csrf: str
    session_id: str = field(default_factory=lambda: secrets.token_hex(16))
    issued_at: float = 0.0


class Sessions:
    """Reads, issues and clears session cookies; checks CSRF tokens."""

    def __init__(self, settings: SessionSettings, keys: KeyStore, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.keys = keys
        self.revocations: SessionStore | None = keys if isinstance(keys, SessionStore) else None
        self.clock = clock
        self._signer = URLSafeTimedSerializer(settings.secret, salt="stateward.inbox.session")

    def read(self, request: Request) -> Session | None:
        """The request's session if its cookie is present, genuine and not expired."""
        raw = request.cookies.get(self.settings.cookie_name)
        if not raw or len(raw) > 1024:
            return None
        try:
            data, signed_at = self._signer.loads(raw, max_age=self.settings.max_age_s, return_timestamp=True)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str) or not isinstance(data.get("s"), str):
            return None
        key_id = data.get("k")
        if isinstance(key_id, str) and self.revocations is not None and self.revocations.session_revoked(data["s"]):
            return None  # signed out: this cookie, however copied, is worth nothing
        return Session(
            key_id=key_id if isinstance(key_id, str) else None,
            csrf=data["c"],
            session_id=data["s"],
            issued_at=signed_at.timestamp(),
        )

    def revoke(self, session: Session) -> None:
        """Sign ``session`` out in the store, until its cookie would have expired anyway."""
        if self.revocations is None:
            return
        now = self.clock()
        expires = (session.issued_at or now) + self.settings.max_age_s
        self.revocations.revoke_session(session.session_id, expires, now)

    def principal(self, session: Session | None) -> Principal | None:
        """Who a signed-in session is, from the key as stored now (None once it is revoked)."""
        if session is None or session.key_id is None:
            return None
        record = self.keys.get_api_key(session.key_id)
        if record is None or record.revoked:
            return None
        return Principal(key_id=record.key_id, name=record.name, tenant=record.tenant, roles=frozenset(record.roles))

    def issue(self, response: Response, key_id: str | None, session: Session | None = None) -> Session:
        """Set a session on ``response``: ``session`` if given, else a new one (a fresh CSRF token)."""
        session = session or new_session(key_id)
        payload: dict[str, str] = {"c": session.csrf, "s": session.session_id}
        if session.key_id is not None:
            payload["k"] = session.key_id
        response.set_cookie(
            self.settings.cookie_name,
            self._signer.dumps(payload),
            max_age=self.settings.max_age_s,
            path="/",
            secure=self.settings.secure_cookies,
            httponly=True,
            samesite="lax",
        )
        return session

    def clear(self, response: Response) -> None:
        response.delete_cookie(
            self.settings.cookie_name, path="/", secure=self.settings.secure_cookies, httponly=True, samesite="lax"
        )


def new_session(key_id: str | None) -> Session:
    """A session for ``key_id`` (None: signed out) with a new random CSRF token."""
    return Session(key_id=key_id, csrf=secrets.token_urlsafe(32))


def csrf_ok(session: Session | None, token: str | None) -> bool:
    """The form's token equals its session's, compared in constant time."""
    if session is None or not token:
        return False
    return hmac.compare_digest(session.csrf.encode(), token.encode())
