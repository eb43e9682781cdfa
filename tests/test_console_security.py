"""The console's guards: login backoff, the trusted-Host allowlist, Secure cookies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from shardcron.console.app import create_app
from shardcron.console.guard import LoginThrottle, host_name, login_keys
from shardcron.operations.admin import Admin
from shardcron.registry.memory import MemoryRegistry
from shardcron.testing.zookeeper import unique_namespace
from tests.test_console import ADMIN, accounts, csrf_of, seed, serving


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def console(**options: Any) -> Iterator[str]:
    registry = MemoryRegistry(namespace=unique_namespace("guard"))
    registry.start()
    seed(registry)
    try:
        with (
            Admin(registry, cached=True) as admin,
            serving(create_app(admin, accounts(), **options)) as base,
        ):
            yield base
    finally:
        registry.close()


def attempt(client: httpx.Client, user: str, password: str) -> httpx.Response:
    token = csrf_of(client.get("/login").text)
    return client.post("/login", data={"user": user, "password": password, "csrf": token})


def test_the_20th_wrong_login_is_slowed_and_the_wait_ends() -> None:
    clock = FakeClock()
    with (
        console(throttle=LoginThrottle(clock=clock)) as base,
        httpx.Client(base_url=base) as client,
    ):
        answers = [attempt(client, ADMIN[0], f"guess-{n}") for n in range(20)]
        assert [a.status_code for a in answers[:5]] == [401] * 5  # the first misses are free
        assert answers[19].status_code == 429
        wait = int(answers[19].headers["retry-after"])
        assert wait >= 1 and "Too many wrong passwords" in answers[19].text
        # During the wait even the right password is not checked: guessing cannot go on.
        assert attempt(client, *ADMIN).status_code == 429
        clock.now += wait
        assert attempt(client, *ADMIN).status_code == 303


def test_backoff_counts_per_client_address_and_per_user() -> None:
    clock = FakeClock()
    throttle = LoginThrottle(free=2, base=1, cap=8, clock=clock)
    for _ in range(4):
        throttle.failed(login_keys("10.0.0.1", "ops"))
    # The same user from elsewhere waits; so does another user from the same address.
    assert throttle.retry_after(login_keys("10.0.0.9", "OPS")) == 4
    assert throttle.retry_after(login_keys("10.0.0.1", "dev")) == 4
    assert throttle.retry_after(login_keys("10.0.0.9", "dev")) == 0
    throttle.failed(login_keys("10.0.0.1", "ops"))
    assert throttle.retry_after(login_keys("10.0.0.1", "ops")) == 8  # doubled, and capped
    throttle.failed(login_keys("10.0.0.1", "ops"))
    assert throttle.retry_after(login_keys("10.0.0.1", "ops")) == 8
    throttle.succeeded(login_keys("10.0.0.1", "ops"))
    assert throttle.retry_after(login_keys("10.0.0.1", "ops")) == 0


def test_a_foreign_host_is_refused() -> None:
    with console() as base:
        port = base.rsplit(":", 1)[1]
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io"):
            answer = httpx.get(f"{base}/login", headers={"Host": host})
            assert answer.status_code == 400 and "Unknown Host" in answer.text
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
            assert httpx.get(f"{base}/login", headers={"Host": host}).status_code == 200
    with console(allowed_hosts=["jobs.example.com"]) as base:
        assert httpx.get(f"{base}/login", headers={"Host": "jobs.example.com"}).status_code == 200
        assert httpx.get(f"{base}/login").status_code == 400


@pytest.mark.parametrize(
    ("header", "name"),
    [("Jobs.Example.com:8899", "jobs.example.com"), ("[::1]:8899", "::1"), ("[::1]", "::1")],
)
def test_host_names_are_read_without_port_and_brackets(header: str, name: str) -> None:
    assert host_name(header) == name


def test_cookies_are_secure_when_asked_or_when_a_proxy_says_https() -> None:
    with console() as base:
        plain = httpx.get(f"{base}/login").headers.get_list("set-cookie")
        # uvicorn believes X-Forwarded-Proto from a loopback proxy (its default).
        proxied = httpx.get(
            f"{base}/login", headers={"X-Forwarded-Proto": "https"}
        ).headers.get_list("set-cookie")
    with console(secure_cookies=True) as base:
        forced = httpx.get(f"{base}/login").headers.get_list("set-cookie")
    assert plain and not any("secure" in c.lower() for c in plain)
    assert proxied and all(c.endswith("; Secure") for c in proxied)
    assert forced and all(c.endswith("; Secure") for c in forced)
