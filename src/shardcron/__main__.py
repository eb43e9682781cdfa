"""``python -m shardcron``: the same as the ``shardcron`` command."""

from shardcron.cli.main import main

main(prog_name="shardcron")
