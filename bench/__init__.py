"""shardcron's benchmark suite: one command, every figure of issue 8, against the baselines.

Run it from the repository root::

    .venv/bin/python -m bench            # the whole suite, about 8 minutes on 2 cores
    .venv/bin/python -m bench --quick    # a smoke run of every section, about 1.5 minutes
    .venv/bin/python -m bench --only failover --only scale

It starts its own ZooKeeper (configured like the Java baseline's, see :mod:`bench.common`),
runs real ``shardcron`` Schedulers in worker processes, and prints Markdown tables:

1. registry requests per fire (ZooKeeper's ``mntr``), :mod:`bench.roundtrips`;
2. fire lateness, same runs (2a) and with many jobs per process (2b), :mod:`bench.lateness`;
3. failover delay after SIGKILL, :mod:`bench.failover`;
4. jobs per process, memory, threads and start-up, and the scale targets of issue 14,
   :mod:`bench.scale`; a herd of jobs due in the same second on 2 workers, :mod:`bench.herd`;
5. resharding 10,000 items over 50 instances (and 100,000 over 100 in the full run),
   phase by phase, :mod:`bench.resharding`.

Baselines: Java ElasticJob-Lite 3.0.4 as measured on a machine of the same kind
(``shared/reference/elasticjob-java-measured.md``; constants cite its sections), and
APScheduler 3 running the same jobs in one process, measured in the same run. A target
that is not met prints ``MISSED``; the suite never fails on a slow figure.
"""
