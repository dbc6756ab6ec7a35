"""Where a role runs: its CPU priority (``rulka-worker --priority``; ``rulka run`` starts workers
below normal) and its cores (``--cpu-cores``; ``rulka run`` keeps workers and relay off the
trainer's cores)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rulka.cli import format_cores, parse_cores, set_process_priority
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



@pytest.mark.parametrize(("text", "cores"), [("1", [1]), ("0,2", [0, 2]), ("2-5,7", [2, 3, 4, 5, 7]),
                                             (" 3 , 1-2", [1, 2, 3])])
def test_core_lists_parse_and_print_back(text, cores):
    assert parse_cores(text) == cores
    assert parse_cores(format_cores(cores)) == cores
    assert format_cores([7, 2, 3, 4, 5]) == "2-5,7"


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1,,2", "1-2-3"])
def test_a_bad_core_list_is_a_one_line_error(text):
    with pytest.raises(UserError, match="cores must be a list like"):
        parse_cores(text)


def _cfg(trainer_threads=None, worker_threads=1):
    from rulka.config import load_config

    return load_config(None, [f"worker.torch_threads={worker_threads}"]
                       + ([f"trainer.torch_threads={trainer_threads}"] if trainer_threads else []))


def test_rulka_run_leaves_the_trainer_its_thread_count_of_cores_and_puts_the_rest_elsewhere():
    from rulka.cli.run import worker_cores

    # 2 cores, 2 workers: the trainer gets 1 thread and core 0; workers and relay share core 1
    assert worker_cores(_cfg(), 2, [0, 1]) == [1]
    # 16 cores, 4 workers: 12 trainer threads on 0-11, workers on 12-15
    assert worker_cores(_cfg(), 4, list(range(16))) == [12, 13, 14, 15]
    # the config's own trainer.torch_threads counts; the cores a container allows are used as given
    assert worker_cores(_cfg(trainer_threads=2), 2, [4, 5, 6, 7]) == [6, 7]
    # nothing left over (1 core, or the trainer asks for them all): nothing is pinned
    assert worker_cores(_cfg(), 1, [0]) is None
    assert worker_cores(_cfg(trainer_threads=4), 2, [0, 1, 2, 3]) is None


AFFINITY_PROBE = """
import os, sys, threading
from rulka.cli import parse_cores, set_cpu_affinity
set_cpu_affinity(parse_cores(sys.argv[1]))
seen = []
t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
t.start(); t.join()
print(sorted(os.sched_getaffinity(0)), seen[0])
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and 2 cores")
def test_cpu_affinity_keeps_the_process_and_the_threads_it_starts_on_the_cores():
    core = max(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", AFFINITY_PROBE, str(core)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == f"[{core}] [{core}]"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs an OS that can pin")
def test_a_core_the_process_may_not_use_is_a_one_line_error():
    out = subprocess.run([sys.executable, "-c", AFFINITY_PROBE, "4095"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "could not keep this process on cores 4095" in out.stderr


@pytest.mark.parametrize("module", ["rulka.worker.cli", "rulka.server.cli"])
def test_a_role_given_a_bad_core_list_stops_with_one_line(tmp_path, module):
    args = ["--server", "127.0.0.1:1"] if module == "rulka.worker.cli" else ["--port", "0"]
    out = subprocess.run([sys.executable, "-m", module, *args, "--keys", str(tmp_path), "--cpu-cores", "two"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == "error: cores must be a list like 1 or 0,2 or 2-5,7, not 'two'"
