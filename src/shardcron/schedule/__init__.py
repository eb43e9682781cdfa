"""When jobs fire: cron expressions (Quartz and Unix dialects), time zones, triggers.

Pure functions of wall time; nothing here touches the registry or a thread.

May import: :mod:`shardcron.errors`.
"""
