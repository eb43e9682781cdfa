"""The ``shardcron console`` command: checks its accounts and secret, connects to the
registry and serves :func:`shardcron.console.app.create_app` with uvicorn.

Starlette, Jinja2 and uvicorn come with the ``console`` extra, so they are imported only when
the command runs.
"""

from __future__ import annotations

import click

from shardcron.cli.operations import _admin, _operation, _registry_option
from shardcron.errors import ConfigError, ShardcronError
from shardcron.operations.admin import Admin

CONSOLE_ADMIN_ENV = "SHARDCRON_CONSOLE_ADMIN"
CONSOLE_GUEST_ENV = "SHARDCRON_CONSOLE_GUEST"
CONSOLE_SECRET_ENV = "SHARDCRON_CONSOLE_SECRET"
CONSOLE_MIN_SECRET = 16
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@click.command()
@_registry_option
@click.option("--tracing", metavar="DB_URL", help="The trace database the workers write to.")
@click.option(
    "--host", default="127.0.0.1", show_default=True, metavar="ADDRESS", help="Listen address."
)
@click.option(
    "--port", default=8899, show_default=True, type=click.IntRange(0, 65535), help="Listen port."
)
@click.option(
    "--admin",
    "admins",
    multiple=True,
    envvar=CONSOLE_ADMIN_ENV,
    metavar="USER:PASSWORD",
    help=f"An account that may act; repeatable (default: ${CONSOLE_ADMIN_ENV}). Required.",
)
@click.option(
    "--guest",
    "guests",
    multiple=True,
    envvar=CONSOLE_GUEST_ENV,
    metavar="USER:PASSWORD",
    help=f"A read-only account; repeatable (default: ${CONSOLE_GUEST_ENV}).",
)
@click.option(
    "--secret",
    envvar=CONSOLE_SECRET_ENV,
    help=f"Key that signs session cookies (default: ${CONSOLE_SECRET_ENV}, else random "
    "per start, so a restart logs everyone out).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name the console answers to, e.g. the proxy's; repeatable "
    "(default: the listen address and localhost; '*' for any).",
)
@click.option(
    "--secure-cookies/--no-secure-cookies",
    default=None,
    help="Mark cookies Secure (default: on unless listening on loopback; always on for "
    "requests a trusted proxy says came over HTTPS).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="A proxy whose X-Forwarded-For/-Proto are believed; repeatable [127.0.0.1].",
)
@_operation
def console(
    registry: str | None,
    tracing: str | None,
    host: str,
    port: int,
    admins: tuple[str, ...],
    guests: tuple[str, ...],
    secret: str | None,
    allowed_hosts: tuple[str, ...],
    secure_cookies: bool | None,
    trusted_proxies: tuple[str, ...],
) -> None:
    """Serve the web console: jobs, sharding, servers, history, and every operation."""
    try:
        import uvicorn

        from shardcron.console.app import create_app
        from shardcron.console.auth import Accounts, Role, account
    except ImportError as exc:
        raise ShardcronError(
            f"the console needs its extra ({exc.name} is missing): pip install 'shardcron[console]'"
        ) from None
    from shardcron.tracing.sql import open_engine

    accounts = Accounts(
        [account(text, Role.ADMIN, source="--admin") for text in admins]
        + [account(text, Role.GUEST, source="--guest") for text in guests]
    )
    if secret is not None and len(secret) < CONSOLE_MIN_SECRET:
        raise ConfigError("--secret", f"too short; use at least {CONSOLE_MIN_SECRET} characters")
    engine = open_engine(tracing) if tracing else None
    # The console reads from a watched copy of the namespace: a refresh costs no round trip.
    with _admin(registry) as direct, Admin(direct.registry, cached=True) as admin:
        app = create_app(
            admin,
            accounts,
            tracing=engine,
            secret=secret,
            allowed_hosts=[*LOOPBACK, host, *allowed_hosts],
            secure_cookies=host not in LOOPBACK if secure_cookies is None else secure_cookies,
        )
        where = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
        click.echo(
            f"shardcron console on {where} (namespace {direct.registry.namespace!r}"
            f"{', history from ' + engine.url.render_as_string() if engine else ''})",
            err=True,
        )
        if host not in LOOPBACK:
            click.echo(
                f"warning: listening on {host} over plain HTTP; put it behind HTTPS "
                "before anyone logs in over a network, and name every Host it is reached "
                "by with --allowed-host",
                err=True,
            )
        try:
            uvicorn.run(
                app,
                host=host,
                port=port,
                log_level="warning",
                proxy_headers=True,
                forwarded_allow_ips=list(trusted_proxies) or "127.0.0.1",
            )
        finally:
            if engine is not None:
                engine.dispose()
