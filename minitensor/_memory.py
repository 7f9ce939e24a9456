"""Keep freed memory for reuse instead of handing it back to the operating system.

An autograd training step allocates and frees the same few hundred arrays every step. glibc's
malloc, by default, returns large freed blocks to the operating system (munmap, or trimming the
top of the heap), so the next step faults every page of them in again, and a training step
spends a measurable part of its time in those page faults (benchmarks/README.md, "Memory").
Deep-learning frameworks keep a cache of freed blocks for this reason; for numpy arrays two
malloc settings do the same: blocks under 32 MiB come from the heap (not from mmap), and the
heap is never trimmed. The process keeps its peak memory
until it exits, as a caching allocator does.

Applied once, when the first optimizer is created (config.keep_freed_memory), on Linux with
glibc. MINITENSOR_KEEP_FREED_MEMORY=0 leaves malloc alone; so does any MALLOC_MMAP_THRESHOLD_ /
MALLOC_TRIM_THRESHOLD_ you set yourself (config.py decides; this module only sets).
"""

import ctypes
import ctypes.util
import sys

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value: 32 MiB on 64-bit machines
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes a C int: 2 GiB, never reached in practice


def keep_freed_memory():
    """Set the two malloc parameters above; True if they were set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt  # glibc (and a few others) have it; musl does not
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
