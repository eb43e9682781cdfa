"""Running the items a fire claimed: job types, lanes, the worker pool, listeners, errors.

:mod:`.lanes` runs a claimed fire's items on workers (the
:class:`~shardcron.coordination.inflight.Lanes` that coordination is given),
:mod:`.jobs` what one item run executes per job type (Python, SCRIPT, HTTP),
:mod:`.workerpool` the threads, :mod:`.listeners` the code around each fire and
:mod:`.errorhandlers` what happens when an item fails.

May import: everything below it (errors, model, schedule, config, registry, coordination).
"""
