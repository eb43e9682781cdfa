"""``shardcron zookeeper``: a ZooKeeper for development in one command.

It runs the installed ZooKeeper (the Debian package, or an Apache tarball named by
``$ZOOKEEPER_HOME``) on 127.0.0.1 with the same launcher the test suite uses, prints the
connect string, and stops the server on Ctrl-C or SIGTERM. One standalone server on loopback,
tuned like the test suite's (short ticks, no fsync per write): for development only, never for
production (see the deployment docs for an ensemble).
"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path
from types import FrameType

import click

from shardcron.errors import ShardcronError
from shardcron.testing.zookeeper import HOST, ZooKeeperServer

DEFAULT_PORT = 2181


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGINT and SIGTERM both stop the server the way Ctrl-C does


@click.command("zookeeper")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Client port on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep config, data and log here across restarts (default: a temp dir, deleted on exit).",
)
@click.option(
    "--namespace",
    default="my-app",
    show_default=True,
    help="The namespace the printed connect string names.",
)
def zookeeper(port: int, data_dir: Path | None, namespace: str) -> None:
    """Run a local ZooKeeper on 127.0.0.1 for development, until Ctrl-C."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: `&` in a script ignores it
        signal.signal(signum, _interrupt)
    if port and _taken(port):
        _fail(_port_problem(port))
    server = ZooKeeperServer(port=port or None, workdir=data_dir, log_level="warn")
    try:
        try:
            server.start()
        except ShardcronError as exc:
            text = str(exc)
            _fail(_port_problem(port) if "Address already in use" in text else text.splitlines()[0])
        url = f"zk://{HOST}:{server.port}/{namespace}"
        version = server.mntr().get("zk_version", "").split(",")[0].split("-")[0]
        kept = "kept" if data_dir is not None else "deleted on exit"
        click.echo(f"ZooKeeper {version} for development on {HOST}:{server.port}")
        click.echo(f"data and log in {server.workdir} ({kept})")
        click.echo(f"connect string: {url}")
        click.echo(f"  export SHARDCRON_REGISTRY={url}")
        click.echo("  shardcron run jobs.yaml    # in each terminal that should share the jobs")
        click.echo("Ctrl-C stops it.")
        code = server.wait()
        _fail(f"ZooKeeper exited by itself with code {code}; see {server.log_path}")
    except KeyboardInterrupt:
        click.echo("stopping ZooKeeper", err=True)
    finally:
        server.close()


def _taken(port: int) -> bool:
    # Checked before starting: the launcher's readiness probe would take another server on the
    # port for ours. SO_REUSEADDR as Java sets it, so a closed socket in TIME_WAIT is no clash.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def _port_problem(port: int) -> str:
    return (
        f"port {port} on {HOST} is in use (another ZooKeeper?); "
        "pick another with --port N, or --port 0 for any free port"
    )


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)
