"""The last reliability gaps (issue 30), with real processes and real TLS on loopback: a memory that
cannot store a segment stops the trainer without losing it; damaged keys and certificates are one
line and exit 2 on every role; removing an operator's key closes its open connection."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from test_e2e_restarts import SETS, Procs, accepted, wait_for

from rulka.trainer.journal import read_journal

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parent


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


class MemoryProcs(Procs):
    """Procs whose trainer takes extra ``--set``s and finds the test plugins (``roles_helpers``,
    allowed on its command line as a user allows their own plugins)."""

    def start_trainer(self, resume=False, extra=()):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        sets = [a for s in [*SETS, *extra] for a in ("--set", s)]
        cmd = [sys.executable, "-m", "rulka.trainer.cli", "--config",
               str(TESTS.parent / "configs" / "cartpole_simple.yaml"), *sets, "--keys", str(self.keys),
               "--server", f"127.0.0.1:{self.port}", "--allow-plugin", "roles_helpers"]
        cmd += ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        self.trainer = subprocess.Popen(cmd, stdout=self._log("trainer"), stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)


def journaled(run_dir: Path) -> list[tuple[str, int]]:
    return [(w, s) for path in sorted((run_dir / "journal").glob("journal-*.bin"))
            for w, s, _ in read_journal(path, repair=False)]


@pytest.mark.slow
def test_a_memory_that_cannot_allocate_stops_the_trainer_and_loses_nothing(tmp_path):
    procs = MemoryProcs(tmp_path)
    try:
        procs.start_server()
        procs.start_trainer(extra=["trainer.memory=roles_helpers:UnallocatableMemory"])
        procs.start_worker("w0")
        rc = procs.trainer.wait(90)
        log = (tmp_path / "trainer.log").read_text()
        assert rc == 2, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        [line] = error_lines(log)
        assert "cannot allocate" in line and "MemoryError" in line and f"--resume {procs.run_dir}" in line
        # nothing was stored and no checkpoint claims otherwise; what was accepted is in the journal
        assert not (procs.run_dir / "checkpoints" / "latest.json").exists()
        got = accepted(procs.run_dir)
        assert got and sorted(journaled(procs.run_dir)) == sorted(got)

        # the config fixed, the resumed trainer replays the journal into the memory; the worker
        # resends what was never acknowledged, and nothing is lost or stored twice
        procs.start_trainer(resume=True)
        wait_for(lambda: len(accepted(procs.run_dir)) >= len(got) + 10, 90, "segments after the resume")
        procs.workers["w0"].send_signal(signal.SIGINT)
        assert procs.workers["w0"].wait(60) == 0
        procs.trainer.send_signal(signal.SIGINT)
        assert procs.trainer.wait(60) == 0
    finally:
        procs.cleanup()
    got = accepted(procs.run_dir)
    assert not [k for k, c in Counter(got).items() if c > 1]
    produced = [int(s) for s in (tmp_path / "produced-w0.txt").read_text().split()]
    assert set(produced) <= {seq for _, seq in got}
    summary = [x for x in (tmp_path / "trainer.log").read_text().splitlines() if x.startswith("trainer: ")][-1]
    assert int(summary.split()[1]) > 0  # "trainer: N samples, ..."


def test_a_memory_size_key_too_large_for_this_machine_is_one_line_at_validate_and_start(tmp_path):
    for args in (["-m", "rulka.cli", "config", "validate", "configs/cartpole_simple.yaml"],
                 ["-m", "rulka.trainer.cli", "--config", "configs/cartpole_simple.yaml", "--keys",
                  str(tmp_path / "none"), "--run-dir", str(tmp_path / "run")]):
        r = subprocess.run([sys.executable, *args, "--set", "trainer.memory_kwargs.capacity=1e12"],
                           capture_output=True, text=True, timeout=120, cwd=TESTS.parent)
        assert r.returncode == 2, r.stderr[-3000:]
        [line] = r.stderr.strip().splitlines()
        assert "`trainer.memory_kwargs.capacity`" in line and "TiB" in line, line
    assert not (tmp_path / "run").exists()


# -- damaged keys and certificates: one line, exit 2, on every role -----------------------------------
def _damages():
    return {"truncated": lambda data: data[: len(data) // 2], "garbage": lambda data: b"\xff\xfe garbage \x00" * 4,
            "empty": lambda data: b""}


ROLE_FILES = {
    "server": ["password", "trainer.pub", "server/certificate.pem", "server/key.pem"],
    "trainer": ["password", "trainer.pub", "trainer.key", "client/certificate.pem"],
    "worker": ["password", "trainer.pub", "worker.key", "worker.name", "client/certificate.pem"],
    "operator": ["password", "trainer.pub", "operator.key", "operator.name", "client/certificate.pem"],
}


@pytest.fixture(scope="module")
def key_folders(tmp_path_factory):
    from rulka.net.keys import add_operator, add_worker, generate_keys

    root = tmp_path_factory.mktemp("keys") / "keys"
    generate_keys(root, ["localhost"])
    add_worker(root, "w1")
    add_operator(root, "ops")
    return {"server": root, "trainer": root, "worker": root / "bundles" / "w1",
            "operator": root / "operator_bundles" / "ops"}


def damaged(folder: Path, rel: str, damage, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    (copy / rel).write_bytes(damage((copy / rel).read_bytes()))
    return copy


@pytest.mark.parametrize("role", sorted(ROLE_FILES))
def test_every_damaged_credential_of_every_role_is_one_user_error(role, key_folders, tmp_path):
    from rulka.errors import UserError
    from rulka.net.keys import load_credentials

    load_credentials(key_folders[role], role)  # the intact folder loads
    for rel in ROLE_FILES[role]:
        for how, damage in _damages().items():
            if how == "truncated" and (rel == "password" or rel.endswith(".name")):
                continue  # still a password or a name: the relay refuses them (wrong password, not enrolled)
            copy = damaged(key_folders[role], rel, damage, tmp_path)
            with pytest.raises(UserError) as info:
                load_credentials(copy, role)
                raise AssertionError(f"{role}: a {how} {rel} loaded")
            text = str(info.value)
            assert "\n" not in text and len(text) < 400, (rel, how, text)
            assert rel.split("/")[-1] in text or "name" in text, (rel, how, text)


def test_a_server_key_of_another_certificate_is_named(key_folders, tmp_path):
    from rulka.errors import UserError
    from rulka.net.keys import generate_keys, load_credentials

    other = tmp_path / "other"
    generate_keys(other, ["localhost"])
    copy = damaged(key_folders["server"], "server/key.pem", lambda _: (other / "server" / "key.pem").read_bytes(),
                   tmp_path)
    with pytest.raises(UserError, match="is not the key of .*certificate.pem"):
        load_credentials(copy, "server")


def _role_command(role: str, keys: Path, tmp_path: Path) -> list[str]:
    if role == "server":
        return ["rulka.server.cli", "--keys", str(keys), "--port", "0", "--host", "127.0.0.1",
                "--log-file", str(tmp_path / "server.log")]
    if role == "trainer":
        return ["rulka.trainer.cli", "--config", str(TESTS.parent / "configs" / "cartpole_simple.yaml"), "--keys",
                str(keys), "--server", "127.0.0.1:9", "--run-dir", str(tmp_path / "run"), "--minutes", "0.05"]
    return ["rulka.worker.cli", "--server", "127.0.0.1:9", "--keys", str(keys), "--state-dir", str(tmp_path / "state"),
            "--episodes", "1"]


@pytest.mark.parametrize(("role", "rel", "how"), [
    ("server", "server/key.pem", "truncated"), ("server", "server/certificate.pem", "garbage"),
    ("server", "password", "garbage"), ("trainer", "trainer.key", "truncated"),
    ("worker", "worker.name", "garbage"), ("worker", "worker.key", "empty"),
])
def test_a_role_with_a_damaged_credential_exits_2_with_one_line(role, rel, how, key_folders, tmp_path):
    keys = damaged(key_folders[role], rel, _damages()[how], tmp_path)
    try:
        r = subprocess.run([sys.executable, "-m", *_role_command(role, keys, tmp_path)], capture_output=True,
                           text=True, timeout=120, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{role} with a damaged {rel} did not exit: {exc.stderr!r}") from None
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr[-3000:]
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and rel.split("/")[-1] in line, line


# -- removing an operator closes its open connection -------------------------------------------------
def test_deleting_an_operator_key_closes_its_open_connection(tmp_path):
    import queue

    from rulka.net.keys import add_operator, generate_keys, load_credentials
    from rulka.net.settings import NetworkSettings
    from rulka.net.tls import _make_endpoint, _stop_endpoint
    from rulka.server.server import Server

    keys = tmp_path / "keys"
    generate_keys(keys, ["localhost"])
    creds = load_credentials(add_operator(keys, "ops"), "operator")
    with Server({}, keys, bind_host="127.0.0.1", port=0) as server:
        endpoint = _make_endpoint(NetworkSettings(host="localhost", port=server.port), creds, [])
        inbox = endpoint.received
        try:
            def answers(seconds: float) -> list:
                got, deadline, next_ask = [], time.monotonic() + seconds, 0.0
                while time.monotonic() < deadline:
                    if time.monotonic() >= next_ask:
                        endpoint.send_object(None, {"status": -1})
                        next_ask = time.monotonic() + 0.25
                    try:
                        got.append((time.monotonic(), inbox.get(timeout=0.05)))
                    except queue.Empty:
                        pass
                return got

            before = answers(5)
            assert any(isinstance(o, dict) and "status" in o for _, o in before), before[:3]
            removed = time.monotonic()
            (keys / "operators" / "ops.pub").unlink()
            after = answers(10)
        finally:
            _stop_endpoint(endpoint)
    refused = [t for t, o in after if isinstance(o, dict) and o.get("refused") == "revoked"]
    assert refused and refused[0] - removed < 5.0, after  # the relay checks every 2 s
    late = [t for t, o in after if isinstance(o, dict) and "status" in o and t > refused[0]]
    assert not late, "the removed operator still received status reports"


# -- a worker not enrolled on the relay retries, and connects once its key is there ---------------------
@pytest.mark.slow
def test_a_worker_not_enrolled_on_the_relay_retries_until_its_key_arrives(tmp_path):
    from rulka.net.keys import add_worker, generate_keys
    from rulka.net.status import query_status
    from rulka.server.server import Server

    keys = tmp_path / "keys"
    generate_keys(keys, ["localhost"])
    add_worker(keys, "late")
    aside = tmp_path / "late.pub"
    (keys / "workers" / "late.pub").rename(aside)  # the relay host's copy lacks the new worker
    with Server({}, keys, bind_host="127.0.0.1", port=0) as server:
        log_path = tmp_path / "worker.log"
        with open(log_path, "wb") as log_file:
            p = subprocess.Popen([sys.executable, "-m", "rulka.worker.cli", "--server", f"localhost:{server.port}",
                                  "--keys", str(keys / "bundles" / "late"), "--state-dir", str(tmp_path / "state")],
                                 stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(12)
            assert p.poll() is None, log_path.read_text()[-3000:]  # still trying
            text = log_path.read_text()
            said = [line for line in text.splitlines() if "cannot connect" in line and "not enrolled" in line]
            assert len(said) == 1, text[-3000:]  # once, not per retry
            assert "Traceback" not in text
            aside.rename(keys / "workers" / "late.pub")  # copied to the relay host: read within seconds

            def connected() -> bool:
                clients = query_status({"host": "localhost", "port": server.port}, keys)["server"]["clients"]
                return bool(clients.get("late", {}).get("connected"))

            wait_for(connected, 40, "the worker to connect once enrolled")
            p.send_signal(signal.SIGINT)
            p.wait(60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


# -- a worker whose network process died stops, bounded and logged --------------------------------------
def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the network process through /proc")
def test_a_worker_whose_network_process_died_stops_within_seconds_and_says_why(tmp_path):
    from rulka.net.keys import add_worker, generate_keys
    from rulka.net.status import query_status
    from rulka.server.server import Server

    keys = tmp_path / "keys"
    generate_keys(keys, ["localhost"])
    add_worker(keys, "w1")
    with Server({}, keys, bind_host="127.0.0.1", port=0) as server:
        log_path = tmp_path / "worker.log"
        with open(log_path, "wb") as log_file:
            p = subprocess.Popen([sys.executable, "-m", "rulka.worker.cli", "--server", f"localhost:{server.port}",
                                  "--keys", str(keys / "bundles" / "w1"), "--state-dir", str(tmp_path / "state")],
                                 stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def connected() -> bool:
                clients = query_status({"host": "localhost", "port": server.port}, keys)["server"]["clients"]
                return bool(clients.get("w1", {}).get("connected"))

            wait_for(connected, 60, "the worker to connect")
            [child] = _children(p.pid)  # the link's network process
            os.kill(child, signal.SIGKILL)
            killed = time.monotonic()
            rc = p.wait(30)
            took = time.monotonic() - killed
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    text = log_path.read_text()
    assert rc == 2, text[-3000:]
    assert took < 10, f"took {took:.1f} s to stop"
    for noise in ("Traceback", "Exception ignored", "BrokenPipeError"):
        assert noise not in text, text[-3000:]
    [line] = error_lines(text)
    assert "network process exited" in line and "start the worker again" in line, line
    assert any("network process exited" in x and " E " in x for x in text.splitlines())  # logged when it happened
    # a worker started by hand keeps its log, dated, in its state folder: the terminal may be gone
    kept = (tmp_path / "state" / "worker.log").read_text(encoding="utf-8").splitlines()
    assert any(re.match(r"^\d{4}-\d{2}-\d{2} \d\d:\d\d:\d\d I rulka\.worker: worker w1 -> localhost:", x)
               for x in kept), kept
    assert any("network process exited" in x and " E " in x for x in kept), kept
    [stopped] = [x for x in kept if "stopped:" in x]  # how it ended, once, not prefixed twice
    assert " E rulka.worker: worker w1 stopped: " in stopped and stopped.count("stopped:") == 1, stopped
