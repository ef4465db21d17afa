"""Who may see the dashboard and who may change jobs through it.

- **Authentication**: a signed session cookie, given by ``/login`` in exchange
  for the dashboard's token (compared in constant time), or an
  ``Authorization: Bearer <token>`` header (for scrapers of ``/metrics``).
  ``--no-auth`` turns this off, explicitly.
- **CSRF**: every state-changing request is a POST that must carry the
  session's CSRF token (an HMAC of the session id) in its form, and whose
  ``Origin`` (or, failing that, ``Referer``) is the dashboard itself. The
  cookie is ``SameSite=Strict`` and ``HttpOnly`` on top of that.

Sessions live only in signed cookies (no server state); a restart with a new
secret logs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["COOKIE", "Guard", "Session"]

COOKIE = "tether_session"


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    #: True when the session came from a login (or auth is off)
    authenticated: bool
    #: True when the caller must be sent a (new) cookie
    fresh: bool = False


class Guard:
    def __init__(self, *, token: str | None, secret: bytes | None = None) -> None:
        """``token`` None means no authentication (``--no-auth``)."""
        if token is not None and len(token) < 8:
            raise ValueError("the dashboard token must be at least 8 characters")
        self.token = token
        self._secret = secret or secrets.token_bytes(32)

    @property
    def auth_required(self) -> bool:
        return self.token is not None

    # -- sessions --------------------------------------------------------------------
    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def cookie_value(self, session: Session) -> str:
        kind = "a" if session.authenticated else "p"  # authenticated or pre-login
        return f"{kind}.{session.id}.{self._sign('session:' + kind, session.id)}"

    def session(self, request: Request) -> Session:
        """The caller's session; a fresh one (to be set as a cookie) if it has none."""
        raw = request.cookies.get(COOKIE, "")
        parts = raw.split(".")
        if len(parts) == 3:
            kind, sid, sig = parts
            if kind in ("a", "p") and hmac.compare_digest(sig, self._sign("session:" + kind, sid)):
                return Session(sid, authenticated=kind == "a" or not self.auth_required)
        return Session(secrets.token_urlsafe(18), authenticated=not self.auth_required, fresh=True)

    def login(self, given: str) -> Session | None:
        """A new authenticated session if ``given`` is the token."""
        if self.token is None:
            return Session(secrets.token_urlsafe(18), authenticated=True, fresh=True)
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return Session(secrets.token_urlsafe(18), authenticated=True, fresh=True)
        return None

    def bearer_ok(self, request: Request) -> bool:
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        return hmac.compare_digest(header.encode(), f"Bearer {self.token}".encode())

    # -- CSRF ----------------------------------------------------------------------------
    def csrf_token(self, session: Session) -> str:
        return self._sign("csrf", session.id)

    def csrf_problem(self, request: Request, session: Session, form_token: str | None) -> str | None:
        """Why this POST must be refused, or None when it is same-origin and carries
        the session's token."""
        origin = request.headers.get("origin")
        source = origin if origin is not None else request.headers.get("referer")
        if not source:
            return "the request carries neither Origin nor Referer"
        if source == "null" or _origin_of(source) != _own_origin(request):
            return f"cross-site request (from {source!r})"
        if session.fresh:
            return "no session"
        if not form_token or not hmac.compare_digest(form_token, self.csrf_token(session)):
            return "missing or wrong CSRF token"
        return None


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}".lower()


def safe_next(target: str | None) -> str:
    """Only local paths as a redirect target after login (no ``//evil``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
