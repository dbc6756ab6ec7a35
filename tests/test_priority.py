"""A role's CPU priority (``rulka-worker --priority``; ``rulka run`` starts workers below normal)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rulka.cli import set_process_priority
from rulka.errors import UserError

PROBE = """
import os, sys, threading
from rulka.cli import set_process_priority
set_process_priority(sys.argv[1])
seen = []
t = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
t.start(); t.join()
child = os.getpriority(os.PRIO_PROCESS, 0)
print(child, seen[0])
"""


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX nice values")
@pytest.mark.parametrize(("level", "nice"), [("normal", 0), ("below_normal", 10), ("idle", 19)])
def test_priority_lowers_the_process_and_the_threads_it_starts_afterwards(level, nice):
    own = os.getpriority(os.PRIO_PROCESS, 0)
    out = subprocess.run([sys.executable, "-c", PROBE, level], capture_output=True, text=True, timeout=60, check=True)
    main_thread, later_thread = map(int, out.stdout.split())
    expected = max(own, nice)  # never raised back: an already lower priority is kept
    assert (main_thread, later_thread) == (expected, expected)


def test_unknown_priority_is_a_one_line_error():
    with pytest.raises(UserError, match="priority must be one of normal, below_normal, idle"):
        set_process_priority("realtime")

