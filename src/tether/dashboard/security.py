"""Who may see the dashboard and who may change jobs through it.

- **Authentication**: a signed session cookie, given by ``/login`` in exchange
  for the dashboard's token (compared in constant time), or an
  ``Authorization: Bearer <token>`` header (for scrapers of ``/metrics``).
  ``--no-auth`` turns this off, explicitly.
- **CSRF**: every state-changing request is a POST that must carry the
  session's CSRF token (an HMAC of the session id) in its form, and whose
  ``Origin`` (or, failing that, ``Referer``) is the dashboard itself. The
  cookie is ``SameSite=Strict`` and ``HttpOnly`` on top of that.
- **Host**: every request's ``Host`` must be one the dashboard answers to
  (by default the loopback names), else 400. Without it a DNS-rebinding page
  (a foreign name that resolves to the dashboard's address) would be "the
  dashboard's own origin" to the CSRF check above, and could read every page.

Sessions live in signed cookies that carry their issue time: one older than
``SESSION_TTL`` is refused, a logout revokes its session in this process (the
cookie replayed afterwards is refused), and a restart with a new secret logs
everyone out. A page's notice (``?notice=``, what an action did) is shown only
with the dashboard's signature of it, so a link cannot put words of its own on
the dashboard's pages.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigError
from ..numbers import BadNumber, parse_int
from ..server.auth import MIN_TOKEN_LENGTH
from ..server.throttle import Throttle

__all__ = ["COOKIE", "LOOPBACK_HOSTS", "SESSION_TTL", "Guard", "HostCheck", "Session", "allowed_names", "host_name"]

COOKIE = "tether_session"
#: seconds a login lasts
SESSION_TTL = 12 * 3600
#: the names a dashboard on a loopback address answers to by default
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    #: True when the session came from a login (or auth is off)
    authenticated: bool
    #: True when the caller must be sent a (new) cookie
    fresh: bool = False


class Guard:
    def __init__(self, *, token: str | None, secret: bytes | None = None, throttle: Throttle | None = None) -> None:
        """``token`` None means no authentication (``--no-auth``). ``throttle``
        holds back addresses whose tokens failed (a new one by default)."""
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise ConfigError(f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters, as a server "
                              "token must (e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        self.token = token
        self._secret = secret or secrets.token_bytes(32)
        self.throttle = throttle or Throttle()
        #: logged-out session ids, and until when (monotonic) to refuse them
        self._revoked: dict[str, float] = {}

    @property
    def auth_required(self) -> bool:
        return self.token is not None

    # -- sessions --------------------------------------------------------------------
    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def cookie_value(self, session: Session) -> str:
        kind = "a" if session.authenticated else "p"  # authenticated or pre-login
        issued = str(int(time.time()))
        return f"{kind}.{session.id}.{issued}.{self._sign('session:' + kind, f'{session.id}:{issued}')}"

    def session(self, request: Request) -> Session:
        """The caller's session; a fresh one (to be set as a cookie) if it has
        none, or one that is expired, revoked or not signed by this dashboard."""
        raw = request.cookies.get(COOKIE, "")
        parts = raw.split(".")
        if len(parts) == 4:  # anything malformed (another app's cookie of that name, say) is no session
            kind, sid, issued, sig = parts
            if (kind in ("a", "p") and 0 <= time.time() - _issued_at(issued) < SESSION_TTL
                    and _same(sig, self._sign("session:" + kind, f"{sid}:{issued}"))
                    and sid not in self._revoked):
                return Session(sid, authenticated=kind == "a" or not self.auth_required)
        return Session(secrets.token_urlsafe(18), authenticated=not self.auth_required, fresh=True)

    def revoke(self, session: Session) -> None:
        """Logout: this session's cookie is refused from now on (in this
        process; a cookie lasts SESSION_TTL at most, so that is how long the
        id is kept)."""
        now = time.monotonic()
        self._revoked = {sid: until for sid, until in self._revoked.items() if until > now}
        self._revoked[session.id] = now + SESSION_TTL

    # -- notices ----------------------------------------------------------------------------
    def notice_signature(self, notice: str) -> str:
        return self._sign("notice", notice)

    def notice(self, request: Request) -> str | None:
        """The page's ``?notice=`` if this dashboard wrote it (``&ns=`` signs it)."""
        text, sig = request.query_params.get("notice"), request.query_params.get("ns", "")
        if text is None or not _same(sig, self.notice_signature(text)):
            return None
        return text

    def retry_after(self, request: Request) -> int | None:
        """Seconds the request's address must wait before a token of its is looked at, or None."""
        return self.throttle.retry_after(_address(request))

    def login(self, given: str, request: Request) -> Session | None:
        """A new authenticated session if ``given`` is the token (a failure is
        logged and counted against the request's address)."""
        if self.token is None:
            return Session(secrets.token_urlsafe(18), authenticated=True, fresh=True)
        if self._checked(hmac.compare_digest(given.encode(), self.token.encode()), request, "the dashboard's login"):
            return Session(secrets.token_urlsafe(18), authenticated=True, fresh=True)
        return None

    def bearer_ok(self, request: Request) -> bool:
        """An ``Authorization: Bearer`` header with the token (a wrong one is
        counted as a failed login is; none at all is not a guess)."""
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        if not header:
            return False
        return self._checked(hmac.compare_digest(header.encode(), f"Bearer {self.token}".encode()), request,
                             "the dashboard's /metrics")

    def _checked(self, ok: bool, request: Request, face: str) -> bool:
        if ok:
            self.throttle.succeeded(_address(request))
        else:
            self.throttle.failed(_address(request), face)
        return ok

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
        if not form_token or not _same(form_token, self.csrf_token(session)):
            return "missing or wrong CSRF token"
        return None


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"
def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a signature someone sent (as bytes: on str,
    ``compare_digest`` raises TypeError for non-ASCII text, a 500 anyone
    could cause with ``?ns=²`` or a cookie)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _issued_at(text: str) -> int:
    """A cookie's issue time; -1 (never valid) when it is not ASCII digits."""
    try:
        return parse_int(text, "issue time")
    except BadNumber:
        return -1


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}".lower()


def host_name(value: str) -> str:
    """The host of a ``Host`` header (or an allowed-host entry) without its port,
    lower case, IPv6 in brackets, no trailing dot: ``[::1]:8080`` -> ``[::1]``,
    ``Example.COM.:443`` -> ``example.com``."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[:end + 1] if end > 0 else value
    if value.count(":") > 1:  # a bare IPv6 address, as one may give it on the command line
        return f"[{value}]"
    return value.partition(":")[0].rstrip(".")


def allowed_names(hosts: Iterable[str]) -> list[str]:
    """The allowed hosts, normalised by ``host_name``; refuses none at all."""
    if isinstance(hosts, str):
        raise TypeError(f"allowed_hosts must be a list of host names, not the string {hosts!r}")
    names = sorted({host_name(h) for h in hosts if h.strip()})
    if not names:
        raise ValueError("allowed_hosts is empty: the dashboard would answer no request")
    return names


class HostCheck:
    """ASGI middleware: answer only requests whose ``Host`` is allowed, a 400
    that says why to the rest. ``*`` allows any host, ``*.example.com`` any
    subdomain of example.com."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = allowed_names(allowed)
        self.any = "*" in self.allowed

    def allows(self, host: str) -> bool:
        if self.any:
            return True
        name = host_name(host)
        if not name:
            return False
        return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in self.allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not self.allows(host):
                response = PlainTextResponse(
                    f"refused: the Host header {host!r} is not a name this dashboard answers to "
                    f"(it answers to {', '.join(self.allowed)}). Reached through a proxy or a domain "
                    "name? Start it with --allowed-host NAME (create_app(allowed_hosts=...)).\n",
                    status_code=400, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def safe_next(target: str | None) -> str:
    """Only local paths as a redirect target after login (no ``//evil``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
