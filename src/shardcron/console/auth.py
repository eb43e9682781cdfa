"""Who may use the console, and proof that a change request comes from the console's pages.

Two roles: an ``admin`` may act (trigger, disable, edit, remove, ...), a ``guest`` only
reads. Accounts are ``USER:PASSWORD`` pairs given when the console starts; nothing is
stored. A login compares the password with every account's in constant time, so the time
a wrong login takes tells nothing about which users exist.

The session is a cookie signed with the console's secret (HttpOnly, SameSite=Lax) that
holds the user name, a session id and a CSRF token; it expires a fixed time after login.
The role is looked up on every request, so a restart with other accounts takes effect at
once; a secret made at random per process also ends every session on restart. A signed
cookie stays valid until it expires, so a copy would outlive its logout: the ids of
sessions logged out are kept (in this process) until their cookies expire.

Every POST must carry the session's token in its ``csrf`` form field, and when the
browser names the page it comes from (``Origin``, else ``Referer``), that page must be on
the console's own origin. Either check alone stops a cross-site form; both are cheap.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from starlette.requests import Request

from shardcron.errors import ConfigError

TOKEN_BYTES = 32


class Role(StrEnum):
    ADMIN = "admin"
    GUEST = "guest"


@dataclass(frozen=True, slots=True)
class Account:
    user: str
    role: Role
    digest: bytes = field(repr=False)  # sha256 of the password: equal lengths to compare


def account(text: str, role: Role, *, source: str = "account") -> Account:
    """An account from ``USER:PASSWORD``; ``source`` names the option, for the error."""
    user, sep, password = text.partition(":")
    if not sep or not user.strip() or not password:
        raise ConfigError(source, "expected USER:PASSWORD with both parts, e.g. ops:s3cret-pass")
    return Account(user.strip(), role, _digest(password))


class Accounts:
    """The console's accounts, by user name."""

    def __init__(self, accounts: Iterable[Account]) -> None:
        self._by_user: dict[str, Account] = {}
        for each in accounts:
            if each.user in self._by_user:
                raise ConfigError("console accounts", f"user {each.user!r} is given twice")
            self._by_user[each.user] = each
        if not any(a.role is Role.ADMIN for a in self._by_user.values()):
            raise ConfigError(
                "console accounts",
                "no admin account; pass --admin USER:PASSWORD or set SHARDCRON_CONSOLE_ADMIN",
            )

    def authenticate(self, user: str, password: str) -> Account | None:
        """The account if the password is right; the same work whether or not the user exists."""
        offered = _digest(password)
        found = None
        for each in self._by_user.values():
            # Both comparisons run for every account: no early exit to time.
            same_user = hmac.compare_digest(each.user.encode(), user.encode())
            same_password = hmac.compare_digest(each.digest, offered)
            if same_user and same_password:
                found = each
        return found

    def role(self, user: object) -> Role | None:
        found = self._by_user.get(user) if isinstance(user, str) else None
        return None if found is None else found.role


class EndedSessions:
    """Ids of sessions logged out in this process, each kept until its cookie expires anyway."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def end(self, session_id: object) -> None:
        if not isinstance(session_id, str):
            return
        now = time.monotonic()
        with self._lock:
            self._until = {s: t for s, t in self._until.items() if t > now}
            self._until[session_id] = now + self.max_age

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._until


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def same_token(expected: object, offered: object) -> bool:
    if not isinstance(expected, str) or not isinstance(offered, str) or not expected:
        return False
    return hmac.compare_digest(expected.encode(), offered.encode())


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from a page on another origin.

    Browsers send ``Origin`` with every POST; ``Referer`` is the fallback of older ones.
    A client that sends neither (a script) is judged by the CSRF token alone.
    """
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if claimed is None:
        return True
    parts = urlsplit(claimed)
    return (parts.scheme, parts.netloc) == (request.url.scheme, request.url.netloc)


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()
