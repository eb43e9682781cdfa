"""The znode layout of one job, exactly as ElasticJob 3.x spells it; nothing else builds paths.

All paths are relative to the namespace, which the registry applies as a chroot::

    /{job}                                   value: callable ref or type name
      config                                 job config YAML
      servers/{ip}                           ENABLED | DISABLED
      instances/{ip}@-@{pid}                 ephemeral, instance YAML
      leases/{ip}@-@{pid}                    shardcron only, ephemeral: the session lives
      trigger/{instance}                     one-shot run request
      sharding/{item}/instance               owner instance id
      sharding/{item}/running                claimed for a run (persistent), value: holder id
      sharding/{item}/failover               ephemeral, id of the instance running it as failover
      sharding/{item}/failovering            persistent twin of ``failover``
      sharding/{item}/misfire | disabled     flags
      leader/election/instance               ephemeral, leader id
      leader/sharding/necessary | processing resharding flag and lock
      leader/failover/items/{item}           crashed items waiting to be claimed
      leader/failover/latch                  lock for claiming them
      guarantee/started|completed/{item}     distributed-once listener bookkeeping
      systemTime/current                     touched to read the registry's clock
      stopped                                shardcron only: instances that stopped cleanly
"""

from __future__ import annotations

from dataclasses import dataclass


def job_of(path: str) -> str:
    """The job name of any path inside a job's subtree."""
    return path.lstrip("/").split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class JobPaths:
    job: str

    @property
    def root(self) -> str:
        return f"/{self.job}"

    @property
    def config(self) -> str:
        return f"/{self.job}/config"

    @property
    def servers(self) -> str:
        return f"/{self.job}/servers"

    def server(self, ip: str) -> str:
        return f"/{self.job}/servers/{ip}"

    @property
    def instances(self) -> str:
        return f"/{self.job}/instances"

    def instance(self, instance: str) -> str:
        return f"/{self.job}/instances/{instance}"

    @property
    def leases(self) -> str:
        return f"/{self.job}/leases"

    def lease(self, instance: str) -> str:
        """shardcron's proof that ``instance``'s session lives, for its claims (see
        :mod:`shardcron.coordination.claims`). Unlike its instance node, no operator removes it."""
        return f"/{self.job}/leases/{instance}"

    @property
    def triggers(self) -> str:
        return f"/{self.job}/trigger"

    def trigger(self, instance: str) -> str:
        return f"/{self.job}/trigger/{instance}"

    @property
    def sharding(self) -> str:
        return f"/{self.job}/sharding"

    def item(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}"

    def item_instance(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/instance"

    def running(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/running"

    def failover(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/failover"

    def failovering(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/failovering"

    def misfire(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/misfire"

    def disabled(self, item: int) -> str:
        return f"/{self.job}/sharding/{item}/disabled"

    @property
    def leader(self) -> str:
        return f"/{self.job}/leader"

    @property
    def election_instance(self) -> str:
        return f"/{self.job}/leader/election/instance"

    @property
    def sharding_necessary(self) -> str:
        return f"/{self.job}/leader/sharding/necessary"

    @property
    def sharding_processing(self) -> str:
        return f"/{self.job}/leader/sharding/processing"

    @property
    def failover_items(self) -> str:
        return f"/{self.job}/leader/failover/items"

    def failover_item(self, item: int) -> str:
        return f"/{self.job}/leader/failover/items/{item}"

    @property
    def failover_latch(self) -> str:
        return f"/{self.job}/leader/failover/latch"

    def guarantee(self, phase: str) -> str:
        return f"/{self.job}/guarantee/{phase}"

    def guarantee_item(self, phase: str, item: int) -> str:
        return f"/{self.job}/guarantee/{phase}/{item}"

    @property
    def stopped(self) -> str:
        return f"/{self.job}/stopped"

    @property
    def system_time(self) -> str:
        return f"/{self.job}/systemTime/current"

    def parse_item(self, path: str) -> tuple[int, str] | None:
        """``(item, leaf)`` for ``/{job}/sharding/{item}[/{leaf}]``; leaf is "" for the item
        node."""
        prefix = self.sharding + "/"
        if not path.startswith(prefix):
            return None
        rest = path[len(prefix) :].split("/")
        if not rest[0].isdigit() or len(rest) > 2:
            return None
        return int(rest[0]), rest[1] if len(rest) == 2 else ""

    def child_name(self, parent: str, path: str) -> str | None:
        """The direct child name of ``parent`` that ``path`` names, or None."""
        prefix = parent + "/"
        if path.startswith(prefix) and "/" not in path[len(prefix) :]:
            return path[len(prefix) :]
        return None
