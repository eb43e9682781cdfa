"""Who runs which item when: one job on one instance, decided on one thread.

The job state machine (:mod:`.runtime`) reacts to registry events, session changes,
timer ticks and request outcomes; its parts are one file each: membership
(:mod:`.membership`), the leader (:mod:`.election`), resharding (:mod:`.sharding`,
strategies in :mod:`.strategies`), claims and completions (:mod:`.claims`, sent together
by :mod:`.groupcommit`), the fire side (:mod:`.firing`, its timer :mod:`.firetimer`, the
items it fires :mod:`.localitems`, fires in flight :mod:`.inflight`), failover
(:mod:`.failover`), skips and their re-runs (:mod:`.misfires`), the repair sweep
(:mod:`.healing`), starting and stopping jobs (:mod:`.registration`,
:mod:`.deregistration`, :mod:`.stopmark`, :mod:`.idleflag`), the claim lead
(:mod:`.claimlead`) and the clock check (:mod:`.clockskew`). Every znode path is built in
:mod:`.paths`; events for observers are in :mod:`.events`.

Sans-I/O: the registry, the clock, the coordinator queue and the workers come in through
narrow protocols (:class:`~shardcron.coordination.host.Host`, the
:class:`~shardcron.registry.Registry`, :class:`~shardcron.coordination.inflight.Lanes`),
which is what lets :mod:`shardcron.simulation` run it on virtual time.

May import: :mod:`shardcron.errors`, :mod:`shardcron.model`, :mod:`shardcron.schedule`,
:mod:`shardcron.config`, :mod:`shardcron.registry`.
"""
