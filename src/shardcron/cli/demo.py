"""``shardcron demo``: three instances on the embedded registry share a six-item job.

Each second it prints which instance ran which item; halfway through it stops one
instance, and the next fires show its items resharded over the other two.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

from shardcron.config.job import JobConfig
from shardcron.model import ShardingContext, instance_id, local_ip
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.scheduler.process import Scheduler

ITEMS = 6


def run(seconds: int, echo: Callable[[str], None]) -> None:
    server = MemoryServer()
    ran: dict[int, dict[int, str]] = defaultdict(dict)
    lock = threading.Lock()
    config = JobConfig(
        job_name="demo",
        cron="* * * * * ?",
        sharding_total_count=ITEMS,
        sharding_item_parameters="0=Beijing,1=Shanghai,2=Guangzhou,3=Shenzhen,4=Hangzhou,5=Chengdu",
    )
    schedulers = []
    for n in range(3):
        me = instance_id(local_ip(), 100 + n)

        def job(ctx: ShardingContext, me: str = me) -> None:
            with lock:
                ran[int(time.time())][ctx.sharding_item] = me

        scheduler = Scheduler(MemoryRegistry(server, "demo"), instance_id=me)
        scheduler.add_job(config, job)
        scheduler.start()
        schedulers.append(scheduler)
    echo(f"3 instances share job 'demo' ({ITEMS} items, every second); Ctrl-C to quit")
    deadline = time.time() + seconds
    stop_at = time.time() + seconds / 2
    stopped = False
    printed = int(time.time())

    def show(until: int) -> int:
        """Print the fires of the seconds before ``until``; return the next one to print."""
        for second in range(printed, until):
            with lock:
                fire = ran.pop(second, {})
            if fire:
                owners = {i: owner.split("@-@")[1] for i, owner in fire.items()}
                cells = "  ".join(f"{i}->{owners.get(i, '-')}" for i in range(ITEMS))
                echo(f"{time.strftime('%H:%M:%S', time.localtime(second))}  {cells}")
        return max(printed, until)

    try:
        while time.time() < deadline:
            time.sleep(0.2)  # the pace of a console display, not a synchronisation
            # A second's fire may still be recording its items: print it one second later.
            printed = show(int(time.time()) - 1)
            if not stopped and time.time() >= stop_at:
                # Every fire before the stop is shown before the line that says so.
                printed = show(int(time.time()))
                victim = schedulers.pop(0)
                echo(
                    f"-- stopping instance {victim.instance_id}; its items move to the other two --"
                )
                victim.stop(grace=5)
                stopped = True
    finally:
        for scheduler in schedulers:
            scheduler.stop(grace=5)
    echo("demo finished")
