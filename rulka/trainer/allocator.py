"""Keep the learner's freed memory for its next update (glibc on Linux).

Each CPU update allocates and frees the same few megabytes of tensors. With glibc's defaults the
allocator hands large freed blocks back to the kernel (``munmap``, or trimming the top of the
heap), and the next update takes them again page by page: about 1,200 page faults per update of
the sim image config's learner, each a kernel entry and a zeroed 4 KB page (``bench/allocator.py``
measures the faults and the updates/s with and without). ``keep_freed_memory`` raises glibc's
mmap and trim thresholds so that blocks below ``mmap_mb`` come from the heap and stay there when
freed, up to ``trim_mb`` of free heap. The cost: the trainer keeps its peak transient memory
instead of returning it between updates.

A ``GLIBC_TUNABLES`` malloc setting in the environment is the user's choice and wins; other C
libraries (Windows, macOS, musl) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_mb: int = 64, trim_mb: int = 512) -> bool:
    """Raise glibc's mmap threshold to ``mmap_mb`` and its trim threshold to ``trim_mb``; returns
    whether it did (False: not glibc, or ``GLIBC_TUNABLES`` sets malloc options)."""
    if not sys.platform.startswith("linux") or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # some glibc versions refuse an mmap threshold above 32 MB (half their largest heap)
    mmap_set = any(mallopt(M_MMAP_THRESHOLD, mb << 20) for mb in (mmap_mb, min(mmap_mb, 32)))
    done = mmap_set and bool(mallopt(M_TRIM_THRESHOLD, trim_mb << 20))
    log.debug("malloc: mmap threshold %d MB, trim threshold %d MB: %s", mmap_mb, trim_mb, done)
    return done
