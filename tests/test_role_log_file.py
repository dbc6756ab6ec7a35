"""A role's log file in its run folder (``rulka.process.log_to_file``): what the trainer says
(the learning-rate cooldown, the best policy put back, warnings, the error that stopped it) stays in
``<run>/logs/trainer.log`` after the terminal is gone, appended over resumes."""

from __future__ import annotations

import logging
import re

from rulka.process import log_to_file


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
