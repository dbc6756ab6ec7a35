"""A role's log file in its run folder (``rulka.process.log_to_file``): what the trainer says
(the learning-rate cooldown, the best policy put back, warnings, the error that stopped it) stays in
``<run>/logs/trainer.log`` after the terminal is gone, appended over resumes."""

from __future__ import annotations

import logging
import re

import pytest

from rulka.errors import UserError
from rulka.process import log_to_file, role_log_file
from rulka.worker.cli import build_parser, log_file_path


def test_log_records_go_to_the_file_with_dates_and_append_across_handlers(tmp_path):
    path = tmp_path / "run" / "logs" / "trainer.log"  # the folders do not exist yet
    log = logging.getLogger("rulka.trainer.test_log_file")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # as before setup_logging: info records would be dropped
    try:
        handler = log_to_file(path)
        try:
            log.info("cooldown from the best policy v%d", 1054)
            log.debug("not at the default level")
        finally:
            root.removeHandler(handler)
            handler.close()
        log.info("after the handler was removed")
        handler = log_to_file(path)  # a resumed run: the same file goes on
        try:
            log.warning("resumed")
        finally:
            root.removeHandler(handler)
            handler.close()
    finally:
        root.setLevel(level)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2, lines
    stamp = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} "
    assert re.match(stamp + r"I rulka\.trainer\.test_log_file: cooldown from the best policy v1054$", lines[0])
    assert re.match(stamp + r"W rulka\.trainer\.test_log_file: resumed$", lines[1])


def test_verbose_keeps_debug_records(tmp_path):
    path = tmp_path / "trainer.log"
    log = logging.getLogger("rulka.trainer.test_log_file_verbose")
    root = logging.getLogger()
    level = root.level
    handler = log_to_file(path, verbose=True)
    try:
        log.debug("a debug line")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
    assert "D rulka.trainer.test_log_file_verbose: a debug line" in path.read_text(encoding="utf-8")


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_a_role_log_file_says_how_the_run_ended_once_and_lets_the_error_through(tmp_path):
    log = logging.getLogger("rulka.worker.test_role_log_end")
    path = tmp_path / "w.log"
    handlers = list(logging.getLogger().handlers)
    with pytest.raises(UserError), role_log_file(path, log, "worker w1"):
        log.info("worker w1 -> relay:55555")
        raise UserError("worker w1 stopped: the server refused this worker for good: revoked")
    with pytest.raises(UserError), role_log_file(path, log, "worker w1"):
        raise UserError("bad key file")
    with pytest.raises(KeyboardInterrupt), role_log_file(path, log, "worker w1"):
        raise KeyboardInterrupt
    with pytest.raises(ZeroDivisionError), role_log_file(path, log, "worker w1"):
        1 / 0  # noqa: B018
    with role_log_file(path, log, "worker w1") as file_only:
        file_only(logging.INFO, "worker w1: 3 episodes")
    log.info("not kept: the file is closed")
    assert logging.getLogger().handlers == handlers  # every handler it added is gone
    text = path.read_text(encoding="utf-8")
    lines = [x for x in text.splitlines() if re.match(r"^\d{4}-", x)]
    said = [x.split(": ", 1)[1] for x in lines]
    assert said == ["worker w1 -> relay:55555",
                    "worker w1 stopped: the server refused this worker for good: revoked",
                    "worker w1 stopped: bad key file",
                    "worker w1 interrupted",
                    "worker w1 stopped by an unexpected error",
                    "worker w1: 3 episodes"], said
    assert " E rulka.worker.test_role_log_end: worker w1 stopped: bad key file" in text
    assert "Traceback" in text and "ZeroDivisionError" in text  # the unexpected one keeps its traceback


def test_a_log_kept_across_runs_is_rolled_over_and_bounded(tmp_path):
    log = logging.getLogger("rulka.worker.test_role_log_roll")
    path = tmp_path / "worker.log"
    for run in range(6):  # six worker runs, each saying more than the size limit allows for two
        with role_log_file(path, log, "worker", max_bytes=2000, backups=2):
            for i in range(20):
                log.info("run %d line %02d %s", run, i, "x" * 40)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["worker.log", "worker.log.1", "worker.log.2"], kept
    assert all(p.stat().st_size <= 2000 for p in tmp_path.iterdir())
    assert "run 5 line 19" in _lines(path)[-1]  # the newest is in worker.log


def test_a_worker_keeps_its_log_in_its_state_folder_unless_told(tmp_path):
    state = tmp_path / "state"
    assert build_parser().parse_args(["--server", "h:1", "--keys", "k"]).log_file is None
    assert log_file_path(None, state) == state / "worker.log"
    assert log_file_path("none", state) is None and log_file_path("None", state) is None
    assert log_file_path(str(tmp_path / "elsewhere.log"), state) == tmp_path / "elsewhere.log"


def test_a_relay_started_by_hand_keeps_its_log_in_the_home_folder_unless_told(tmp_path, monkeypatch):
    from rulka.server.cli import build_parser as server_parser
    from rulka.server.cli import log_file_path as server_log_path

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    by_hand = server_parser().parse_args(["--keys", "k"])
    assert server_log_path(by_hand) == tmp_path / ".rulka" / "server" / "server.log"
    told = server_parser().parse_args(["--keys", "k", "--log-file", str(tmp_path / "relay.log")])
    assert server_log_path(told) == tmp_path / "relay.log"
    assert server_log_path(server_parser().parse_args(["--log-file", "NONE"])) is None
    # started by Server.start (its settings as JSON): the parent's terminal has its log
    child = server_parser().parse_args(["--keys", "k", "--settings-json", "{}"])
    assert server_log_path(child) is None


def test_no_path_keeps_no_file_and_lets_the_error_through(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    handlers = list(logging.getLogger().handlers)
    log = logging.getLogger("rulka.worker.test_role_log_none")
    with pytest.raises(UserError), role_log_file(None, log, "worker") as file_only:
        file_only(logging.INFO, "worker w1: 0 episodes")
        raise UserError("bad key file")
    assert logging.getLogger().handlers == handlers and list(tmp_path.iterdir()) == []
