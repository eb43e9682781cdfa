"""What stands in front of the console's pages: login backoff, trusted hosts, secure cookies.

* :class:`LoginThrottle`: after a few wrong passwords from one client address, or for one
  user name, each further attempt must wait twice as long as the one before (up to a
  cap). An attempt made too early is refused without checking the password, so guessing
  gets slower with every miss and a right guess during the wait does not count.
* :class:`TrustedHosts`: a request whose ``Host`` is not the console's own name is
  refused. A page on another site that rebinds its DNS name to the console's address
  sends its own name as ``Host``; the Origin check cannot see that, this does.
* :class:`SecureCookies`: the ``Secure`` flag on every cookie when the console is told to
  (not bound to loopback) or when the request came over HTTPS (a trusted proxy's
  ``X-Forwarded-Proto``, applied by the server), so a session never goes out over HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Entries kept at most; the oldest go first (a flood of addresses cannot grow memory).
MAX_TRACKED = 10_000


@dataclass
class _Misses:
    count: int
    last: float


class LoginThrottle:
    """Failed logins per key (a client address, a user name) and when the next may come.

    ``free`` misses cost nothing; the next waits ``base`` seconds, then twice that each
    miss, up to ``cap``. Misses are forgotten ``forget_after`` seconds after the last one,
    and on a successful login.
    """

    def __init__(
        self,
        *,
        free: int = 5,
        base: float = 1.0,
        cap: float = 60.0,
        forget_after: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free, self.base, self.cap, self.forget_after = free, base, cap, forget_after
        self.clock = clock
        self._misses: dict[str, _Misses] = {}
        self._lock = threading.Lock()

    def _delay(self, count: int) -> float:
        if count < self.free:
            return 0.0
        return float(min(self.cap, self.base * 2 ** (count - self.free)))

    def retry_after(self, keys: Iterable[str]) -> float:
        """Seconds until an attempt for these keys is considered; 0 when it may go now."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key in keys:
                misses = self._misses.get(key)
                if misses is not None and now - misses.last < self.forget_after:
                    wait = max(wait, misses.last + self._delay(misses.count) - now)
        return max(0.0, wait)

    def failed(self, keys: Iterable[str]) -> None:
        now = self.clock()
        with self._lock:
            for key in keys:
                misses = self._misses.pop(key, None)
                if misses is None or now - misses.last >= self.forget_after:
                    misses = _Misses(0, now)
                misses.count += 1
                misses.last = now
                self._misses[key] = misses  # re-inserted last: the dict stays oldest-first
            while len(self._misses) > MAX_TRACKED:
                del self._misses[next(iter(self._misses))]

    def succeeded(self, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                self._misses.pop(key, None)


def login_keys(address: str | None, user: str) -> tuple[str, str]:
    return f"address:{address or '?'}", f"user:{user.strip().lower()}"


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without port and IPv6 brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class TrustedHosts:
    """Refuses (400) a request whose ``Host`` is not one of ``allowed`` (``*``: any)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = {host_name(h) for h in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or "*" in self.allowed:
            await self.app(scope, receive, send)
            return
        if host_name(Headers(scope=scope).get("host", "")) in self.allowed:
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "Unknown Host: open the console by its own name (see --allowed-host)", 400
        )
        await response(scope, receive, send)


class SecureCookies:
    """Adds ``Secure`` to every cookie when ``always``, or when the request came over HTTPS."""

    def __init__(self, app: ASGIApp, always: bool) -> None:
        self.app = app
        self.always = always

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.always or scope.get("scheme") == "https"):
            await self.app(scope, receive, send)
            return

        async def send_secure(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                cookies = headers.getlist("set-cookie")
                if cookies:
                    del headers["set-cookie"]
                    for cookie in cookies:
                        secure = "; secure" in cookie.lower()
                        headers.append("set-cookie", cookie if secure else f"{cookie}; Secure")
            await send(message)

        await self.app(scope, receive, send_secure)
