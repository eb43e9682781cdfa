"""A wall clock a test steps for one worker process, as an NTP step would (``clockshim.c``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "clockshim.c"


class WallClock:
    """The wall clock of the processes started with :meth:`environment`: off by the
    offset of the last :meth:`step` (0 at first); their monotonic clock is not."""

    def __init__(self, tmp: Path) -> None:
        compiler = shutil.which("cc") or shutil.which("gcc")
        assert compiler is not None, "a C compiler (Debian's gcc) builds the clock shim"
        self.library = tmp / "clockshim.so"
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(self.library), str(SOURCE), "-ldl"],
            check=True,
        )
        self.offset_file = tmp / "clock-offset"
        self.step(0)

    def environment(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(self.library),
            "SHARDCRON_CLOCK_OFFSET_FILE": str(self.offset_file),
        }

    def step(self, offset: float) -> None:
        """Set the wall clock ``offset`` seconds off the real one, at once: the file is
        replaced, so a process reads the old offset or the new one."""
        fresh = self.offset_file.with_suffix(".new")
        fresh.write_text(f"{offset:+g}\n")
        os.replace(fresh, self.offset_file)
