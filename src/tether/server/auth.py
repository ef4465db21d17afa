"""Bearer tokens with scopes, configured by the operator.

A token line is ``TOKEN SCOPE[,SCOPE...]`` (``#`` starts a comment). Scopes:
``worker`` (claim, heartbeat, report, reap), ``producer`` (enqueue, inspect,
cancel, retry) and ``admin`` (everything, plus migrate and destroy). Tokens
are kept only as SHA-256 digests and compared in constant time.

Each token also has a fingerprint, derived from its digest, that the server
records as the owner of the workers the token registers (see ``server.owners``);
it says which token, and nothing more: the token cannot be recovered from it.

Failed tokens are throttled by client address (``throttle``): ``identify``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.requests import Request

from ..errors import ConfigError
from ..store.http.wire import SCOPES
from .requests import ApiError
from .throttle import Throttle

__all__ = ["MIN_TOKEN_LENGTH", "Caller", "TokenTable", "identify", "parse_tokens"]

MIN_TOKEN_LENGTH = 16
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]+")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def fingerprint(digest: bytes) -> str:
    """A token's identity as stored in the database: a hash of its digest under
    a label of its own, so it matches no other use of the digest."""
    return "sha256:" + hashlib.sha256(b"tether worker owner\x00" + digest).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the token's scopes and its fingerprint."""

    scopes: frozenset[str]
    fingerprint: str

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes


@dataclass(frozen=True, slots=True)
class TokenTable:
    entries: tuple[tuple[bytes, frozenset[str]], ...]

    def identify(self, presented: str) -> Caller | None:
        """The caller a presented token stands for, or None. Every entry is
        compared, whatever matched, so the time taken says nothing about the tokens."""
        digest = _digest(presented)
        found: frozenset[str] | None = None
        for known, scopes in self.entries:
            if hmac.compare_digest(digest, known):
                found = scopes
        return None if found is None else Caller(found, fingerprint(digest))

    def scopes_of(self, presented: str) -> frozenset[str] | None:
        """The scopes of a presented token, or None."""
        caller = self.identify(presented)
        return None if caller is None else caller.scopes

    @staticmethod
    def allows(scopes: frozenset[str], wanted: Iterable[str]) -> bool:
        return "admin" in scopes or any(s in scopes for s in wanted)


def parse_tokens(text: str, where: str) -> TokenTable:
    """Lines (or ``;``-separated entries) of ``TOKEN SCOPE[,SCOPE]``."""
    entries: list[tuple[bytes, frozenset[str]]] = []
    seen: set[bytes] = set()
    for n, raw in enumerate(re.split(r"[\n;]", text), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{where}: entry {n} is not 'TOKEN SCOPE[,SCOPE]' (scopes: {', '.join(SCOPES)})")
        token, scope_text = parts
        if len(token) < MIN_TOKEN_LENGTH or not _TOKEN.fullmatch(token):
            raise ConfigError(f"{where}: entry {n}: a token must be at least {MIN_TOKEN_LENGTH} characters of "
                              "letters, digits and ._~+/=- (e.g. from `python -c 'import secrets; "
                              "print(secrets.token_urlsafe(32))'`)")
        scopes = frozenset(s.strip() for s in scope_text.split(",") if s.strip())
        unknown = scopes - set(SCOPES)
        if unknown or not scopes:
            raise ConfigError(f"{where}: entry {n}: unknown scope(s) {sorted(unknown) or '(none)'}; "
                              f"use {', '.join(SCOPES)}")
        digest = _digest(token)
        if digest in seen:
            raise ConfigError(f"{where}: entry {n}: the same token is listed twice")
        seen.add(digest)
        entries.append((digest, scopes))
    if not entries:
        raise ConfigError(f"{where}: no tokens configured; the server refuses to run without any "
                          "(every request needs one)")
    return TokenTable(tuple(entries))


def identify(tokens: TokenTable, throttle: Throttle, request: Request) -> Caller:
    """The caller a request's bearer token stands for: 401 without a known one,
    429 (before the token is looked at) while its address must wait."""
    address = request.client.host if request.client is not None else "unknown"
    wait = throttle.retry_after(address)
    if wait is not None:
        raise ApiError(429, "too_many_failures", f"too many failed authentications from {address} (or from "
                       f"everywhere): try again in {wait}s", {"Retry-After": str(wait)}, retry_after=wait)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "this server needs a bearer token: send 'Authorization: Bearer TOKEN'",
                       {"WWW-Authenticate": "Bearer"})
    caller = tokens.identify(token.strip())
    if caller is None:
        throttle.failed(address, "the API server")
        raise ApiError(401, "unauthorized", "the bearer token is not one this server knows",
                       {"WWW-Authenticate": 'Bearer error="invalid_token"'})
    throttle.succeeded(address)
    return caller
