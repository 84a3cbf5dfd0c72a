"""build_parallelism in a 4 GiB memory-limited container on a bigger host: the cgroup must win over /proc/meminfo.

The checks live in build_parallelism_in_container.sh (it needs Docker and the base image, which the integration tier
provides); this runs it and shows what it measured.
"""

from __future__ import annotations

import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).with_name("build_parallelism_in_container.sh")


def test_build_parallelism_follows_the_cgroup_in_a_memory_limited_container():
    run = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600, check=False)
    print(run.stdout[-4000:])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
