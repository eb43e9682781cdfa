"""``python -m shardcron``: the same as the ``shardcron`` command."""

from shardcron.cli import main

main(prog_name="shardcron")
