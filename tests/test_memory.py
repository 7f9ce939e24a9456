"""minitensor keeps freed memory for reuse (minitensor/_memory.py) once an optimizer exists: a
loop that allocates and frees the same large arrays stops faulting pages in again after the
first round."""

import os
import subprocess
import sys

import pytest

LOOP = """
import resource
import numpy as np
import minitensor as mt
mt.optim.SGD([mt.zeros(1, requires_grad=True)], lr=0.1)  # a training process: malloc is tuned
for _ in range(3):                                       # warm up: the heap grows once
    a = np.ones((512, 1024)); b = a * 2; del a, b
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):                                      # 4 MiB arrays, allocated and freed
    a = np.ones((512, 1024)); b = a * 2; del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


def page_faults(**env):
    done = subprocess.run(
        [sys.executable, "-c", LOOP],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_freed_arrays_are_reused_without_page_faults():
    kept = page_faults()
    returned = page_faults(MINITENSOR_KEEP_FREED_MEMORY="0")
    assert returned > 20 * 1024  # ~1,000 pages a round, faulted in again
    assert kept < returned / 20, (kept, returned)
