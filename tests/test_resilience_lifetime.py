"""Process lifetime with real processes and real TLS on loopback (issue 10): the tlspyo child dies
with its parent, and a role that cannot start exits non-zero with one line instead of hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rulka.net.keys import add_worker, generate_keys
from rulka.net.tls import connect_worker
from rulka.server.server import Server

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "cartpole_iqn.yaml"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("life") / "keys"
    generate_keys(root, ["localhost"])
    add_worker(root, "w1")
    return root


@pytest.fixture(scope="module")
def server(keys):
    srv = Server({}, keys, bind_host="127.0.0.1", port=0).start()
    yield srv
    srv.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped yet) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("role", ["worker", "trainer"])
def test_tlspyo_child_dies_with_a_killed_parent(keys, server, role):
    code = textwrap.dedent(f"""
        import sys, time
        from rulka.net.tls import connect_trainer, connect_worker
        cfg = {{"host": "localhost", "port": {server.port}, "heartbeat_s": 0.5}}
        link = (connect_worker(cfg, {str(keys / "bundles" / "w1")!r}) if {role!r} == "worker"
                else connect_trainer(cfg, {str(keys)!r}))
        assert link.wait_connected(30)
        print(link._endpoint._p.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        child = int(parent.stdout.readline())
        assert pid_alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5.0
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(child), "the tlspyo child outlived its killed parent"
    finally:
        parent.kill()
        parent.wait(10)
        if child and pid_alive(child):
            os.kill(child, signal.SIGKILL)


def run_role(args: list[str], timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Run a role command; a hang is a failure (the timeout kills it)."""
    try:
        return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{args[0]} hung instead of exiting: {exc.stderr!r}") from None


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_worker_with_garbage_certificate_exits_with_one_line(keys, server, tmp_path):
    import shutil

    bundle = tmp_path / "w1"
    shutil.copytree(keys / "bundles" / "w1", bundle)
    (bundle / "client" / "certificate.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n")
    r = run_role(["rulka.worker.cli", "--server", f"localhost:{server.port}", "--keys", str(bundle),
                  "--state-dir", str(tmp_path / "state"), "--episodes", "1"])
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(error_lines(r.stderr)) == 1 and "certificate.pem" in error_lines(r.stderr)[0]
    (bundle / "client" / "certificate.pem").unlink()
    r = run_role(["rulka.worker.cli", "--server", f"localhost:{server.port}", "--keys", str(bundle),
                  "--state-dir", str(tmp_path / "state"), "--episodes", "1"])
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(error_lines(r.stderr)) == 1


SETS = ["trainer.checkpoint_every_s=1000", "logging.wandb.enabled=false", "logging.tensorboard.enabled=false",
        "logging.progress=never"]


def trainer_args(keys: Path, server: Server, run_dir: Path, *extra: str) -> list[str]:
    args = ["rulka.trainer.cli", "--config", str(CONFIG), "--keys", str(keys), "--server", f"localhost:{server.port}",
            "--run-dir", str(run_dir)]
    for s in SETS:
        args += ["--set", s]
    return [*args, *extra]


@pytest.fixture(scope="module")
def finished_run(keys, server, tmp_path_factory):
    """A run folder with one complete checkpoint (the trainer stops after 0.05 minutes)."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    r = run_role(trainer_args(keys, server, run_dir, "--minutes", "0.05"))
    assert r.returncode == 0, r.stderr
    assert (run_dir / "checkpoints" / "latest.json").exists()
    return run_dir


def damaged_copy(run_dir: Path, tmp_path: Path, damage) -> Path:
    import shutil

    copy = tmp_path / "damaged"
    shutil.copytree(run_dir, copy)
    damage(copy)
    return copy


@pytest.mark.slow
def test_resume_from_a_damaged_checkpoint_exits_with_one_line(keys, server, finished_run, tmp_path):
    def damage(run: Path) -> None:  # every checkpoint's weights cut short: nothing to fall back to
        for path in (run / "checkpoints").glob("ckpt-*/agent.safetensors"):
            path.write_bytes(path.read_bytes()[:100])

    run = damaged_copy(finished_run, tmp_path, damage)
    r = run_role(trainer_args(keys, server, run, "--resume", "--minutes", "0.05"))
    assert r.returncode != 0, f"resumed from a damaged checkpoint: {r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    [line] = error_lines(r.stderr)
    assert "agent.safetensors" in line and "checksum" in line


@pytest.mark.slow
def test_huge_memory_size_exits_with_one_line(keys, server, tmp_path):
    r = run_role(trainer_args(keys, server, tmp_path / "run", "--minutes", "0.05",
                              "--set", "memory.memory_size_schedule=[[0, 1000000000000]]"))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(error_lines(r.stderr)) == 1, r.stderr[-3000:]


# -- a worker that cannot connect says why ----------------------------------------------------------
def start_worker(bundle: Path, port: int, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rulka.worker.cli", "--server", f"localhost:{port}",
                             "--keys", str(bundle), "--state-dir", str(state)],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def stderr_after(p: subprocess.Popen[str], seconds: float) -> str:
    """Let a worker run ``seconds``, stop it, return its stderr."""
    try:
        _, err = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate(timeout=10)
    return err


def test_revoked_worker_says_so_once_and_stops(keys, server, tmp_path):
    import shutil

    from rulka.net.keys import revoke_worker

    add_worker(keys, "doomed")
    bundle = tmp_path / "doomed"
    shutil.copytree(keys / "bundles" / "doomed", bundle)
    revoke_worker(keys, "doomed")
    p = start_worker(bundle, server.port, tmp_path / "state")
    err = stderr_after(p, 60)
    assert p.returncode not in (None, 0, -9), err[-3000:]
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert "revoked" in line


def test_wrong_password_and_wrong_ca_are_named_once(keys, server, tmp_path):
    import shutil

    bundle = tmp_path / "w1"
    shutil.copytree(keys / "bundles" / "w1", bundle)
    (bundle / "password").write_text("not-the-password")
    p = start_worker(bundle, server.port, tmp_path / "s1")
    err = stderr_after(p, 60)
    assert p.returncode not in (None, 0, -9) and "Traceback" not in err, err[-3000:]
    assert "wrong password" in error_lines(err)[0]

    other = tmp_path / "other"
    generate_keys(other, ["localhost"])
    shutil.copytree(keys / "bundles" / "w1", tmp_path / "w1ca")
    shutil.copy(other / "client" / "certificate.pem", tmp_path / "w1ca" / "client" / "certificate.pem")
    err = stderr_after(start_worker(tmp_path / "w1ca", server.port, tmp_path / "s2"), 30)
    logged = [line for line in err.splitlines() if "cannot connect" in line]
    assert len(logged) == 1 and "certificate verify failed" in logged[0], err[-3000:]  # once, not per retry
    assert "link=TLS certificate verify failed" in err  # and in the worker's status line


def test_unreachable_server_is_named_and_retries_back_off(keys):
    import socket as socketlib
    import threading

    listener = socketlib.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    accepted = []

    def accept_and_close() -> None:  # a port that accepts and closes at once
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.close()

    threading.Thread(target=accept_and_close, daemon=True).start()
    link = connect_worker({"host": "localhost", "port": port}, keys / "bundles" / "w1")
    try:
        time.sleep(12)
        problem = link.problem
    finally:
        link.close()
        listener.close()
    # exponential from 0.5 s (0.5, 1, 2, 4, 8 with jitter): about 5 attempts in 12 s, where a
    # fixed 0.5 s period made ~24
    assert 3 <= len(accepted) <= 8, accepted
    assert "closed before the server's hello" in problem
    # a port where nothing listens
    link = connect_worker({"host": "localhost", "port": port}, keys / "bundles" / "w1")
    try:
        deadline = time.monotonic() + 10
        while "connection refused" not in link.problem and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "server unreachable: connection refused" in link.problem
    finally:
        link.close()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="stops the relay with SIGSTOP")
def test_heartbeats_do_not_pile_up_while_the_relay_is_silent_or_away(keys, tmp_path):
    """A link beats every ``heartbeat_s``. While the relay is silent (stopped: the connection
    stays open) or away (killed, then back on its port), those beats must not pile up and reach
    the relay at once when it answers again: it rate-limits pings and would count an honest
    worker's burst as bad input (on the old code, 6 s at 10 beats a second: 20 and more)."""
    from rulka.net.status import query_status

    srv = Server({}, keys, bind_host="127.0.0.1", port=0).start()
    port = srv.port
    cfg = {"host": "localhost", "port": port, "heartbeat_s": 0.1}
    link = connect_worker(cfg, keys / "bundles" / "w1")
    try:
        assert link.wait_connected(30)
        os.kill(srv.pid, signal.SIGSTOP)  # silent: TCP still takes the beats into the relay's socket
        time.sleep(6)
        assert not link.connected()
        os.kill(srv.pid, signal.SIGCONT)
        assert link.wait_connected(15)
        assert query_status(cfg, keys, timeout=15)["server"]["clients"]["w1"]["bad"] == {}

        os.kill(srv.pid, signal.SIGKILL)  # away: the link keeps what it sends for the next connection
        srv.stop()
        time.sleep(6)
        srv = Server({}, keys, bind_host="127.0.0.1", port=port).start()
        assert link.wait_connected(30)
        time.sleep(1)
        assert query_status(cfg, keys, timeout=15)["server"]["clients"]["w1"]["bad"] == {}
    finally:
        link.close()
        srv.stop()
