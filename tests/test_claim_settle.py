"""A claim whose answer was lost is settled from the registry: it runs only on a
``running`` this session created.

An instance whose session expired lives on with the same id. Its old session's
``running`` nodes stay (persistent) until its own sweep or the leader repairs them. A
claim sent on the new session before that sweep is refused by such a node; if that
answer is lost, the node still names this instance, and running on it would run the item
while the leader's repair of it fails the item over: two runs at once.

Each test drives one instance's sessions on the embedded registry, step by step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from shardcron.coordination.claims import Claiming, settle
from shardcron.coordination.paths import JobPaths
from shardcron.errors import TransactionError
from shardcron.registry import Create, TreeCache
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer

ME = "127.0.0.1@-@101"
PATHS = JobPaths("settled")


@pytest.fixture
def registry() -> Iterator[MemoryRegistry]:
    server = MemoryServer()
    registry = MemoryRegistry(server, "claims")
    registry.start()
    registry.create(PATHS.item(0))
    registry.create(PATHS.leases)
    yield registry
    registry.close()


def lease(registry: MemoryRegistry) -> None:
    """Registering in the current session: the lease a claim checks."""
    registry.transaction([Create(PATHS.lease(ME), ephemeral=True)])


def claim(registry: MemoryRegistry, cache: TreeCache) -> None:
    """A claim of item 0, as a fire sends it; its answer is not looked at (lost)."""
    request = Claiming(cache, PATHS, [0], ME, when=b"1.000", trust_cache=False)
    with contextlib.suppress(TransactionError):  # refused: a running exists, or no lease
        registry.transaction(request.ops())


def expire(registry: MemoryRegistry) -> int:
    """The session expires; the client (same process, same id) gets a new one."""
    old = registry.session_id
    registry.server.expire(old)
    assert registry.connected and registry.session_id != old
    return registry.session_id


def test_a_claim_of_the_new_session_is_not_settled_on_the_old_sessions_running(
    registry: MemoryRegistry,
) -> None:
    cache = registry.tree_cache(PATHS.root)
    lease(registry)
    claim(registry, cache)  # the old session's claim, applied: running names ME
    old = registry.stat(PATHS.running(0))
    assert old is not None

    session = expire(registry)
    lease(registry)  # registered again
    claim(registry, cache)  # refused by the old running; the answer is lost
    settled = settle(registry, PATHS, [0], ME, session)

    assert settled.items == [], "the old session's running was taken for this claim"


def test_a_claim_of_this_session_whose_answer_was_lost_runs(registry: MemoryRegistry) -> None:
    cache = registry.tree_cache(PATHS.root)
    lease(registry)
    claim(registry, cache)
    session = expire(registry)
    lease(registry)
    registry.delete(PATHS.running(0))  # the old claim repaired (own sweep, or the leader)

    claim(registry, cache)  # applied; the answer is lost
    settled = settle(registry, PATHS, [0], ME, session)

    running, item = registry.stat(PATHS.running(0)), registry.stat(PATHS.item(0))
    assert running is not None and item is not None
    assert settled.items == [0]
    assert settled.token == running.czxid and settled.versions == {0: item.version}


def test_nothing_is_settled_before_this_session_registered(registry: MemoryRegistry) -> None:
    cache = registry.tree_cache(PATHS.root)
    lease(registry)
    claim(registry, cache)
    session = expire(registry)

    claim(registry, cache)  # no lease of this session: refused
    assert settle(registry, PATHS, [0], ME, session).items == []
