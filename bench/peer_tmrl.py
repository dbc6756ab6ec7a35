"""Peer comparison with TMRL 0.7.1: bytes on the wire per transition, and its relay path.

Both sides get the same driving: the built-in simulator's scripted driver on the default
track, seen through a 64x64 grayscale camera (TMRL's default "TM20FULL" image setting, with a
4-frame history).

- rulka: a worker segment (``segment_max_steps`` transitions, frames stored once) through the
  ``zstd`` SampleCompressor (``rulka.compress``); bytes of the compressed payload / transitions.
- TMRL: the same transitions turned into TMRL's samples by its own
  ``get_local_buffer_sample_tm20_imgs`` (it keeps the newest frame of the history), gathered in
  its ``Buffer`` and framed as tlspyo 0.3 sends a ``produce`` (pickle of the pickled buffer in a
  4-tuple, plus TMRL's 12-byte header); bytes / transitions.
- TMRL relay: its ``networking.Server`` (a tlspyo Relay with its groups) on loopback, one
  endpoint in the ``workers`` group producing, one in ``trainers`` receiving as its
  TrainerInterface does (notify -1, receive_all); payload MB/s for 64 KB, 1 MB and 26 MB
  messages, plain TCP (TMRL's default) and TLS.

TMRL is installed with ``pip install --no-deps --target`` into a folder under the temp dir
(never into rulka's environment), with the few dependencies its import needs, and runs in a
child process whose HOME is a throwaway folder holding a hand-written
``TmrlData/config/config.json`` (TMRL reads it at import). Everything stays on loopback.
Prints one JSON object; TMRL failures are reported in it, not raised.

``--pendulum`` instead races SAC on Pendulum-v1 through both pipelines, one after the other in
the same run: TMRL's minimal Pendulum pipeline as its tutorial sets it up (``Server``,
``RolloutWorker.run_synchronous`` in a thread, ``Trainer`` with ``SpinupSacAgent``, same
hyperparameters) and ``rulka run configs/pendulum_sac.yaml --workers 1`` (server, trainer and
worker processes, TLS on loopback). Both make their env as
``bench.recorded_pendulum:RecordedPendulum-v1``, which logs every finished episode; the figure is
the wall-clock time (from the pipeline's launch) and env steps at which the mean return of the
last 10 episodes first reaches -200.

    python -m bench.peer_tmrl [--quick] [--tmrl-dir DIR] [--segment-steps N]
    python -m bench.peer_tmrl --pendulum [--minutes M] [--tmrl-dir DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import pickle
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import child_command, child_env
from bench.transport import SIZES as RELAY_SIZES  # the relay sizes transport measures rulka at
from bench.transport import tlspyo_throughput
from rulka.net.tls import free_local_port as free_port

REPO_ROOT = Path(__file__).resolve().parent.parent

TMRL_VERSION = "0.7.1"
# what `import tmrl.networking` needs on Linux besides what rulka already has
TMRL_EXTRA_PACKAGES = ["pandas", "mss", "pytz", "six"]
IMG_SIZE = 64
IMG_HIST_LEN = 4
TMRL_HEADER_SIZE = 12


# -- simulator transitions (shared by both sides) --------------------------------------------------

def drive_sim(n_steps: int, track_name: str = "default") -> dict[str, np.ndarray]:
    """``n_steps`` transitions of the scripted driver in rulka's gymnasium env (``SimTrackEnv``,
    64x64 camera): frames (n+1, 64, 64) uint8, float observations (n+1, float_input_dim),
    actions, speeds, rewards and flags, as a worker records them."""
    from rulka.envs.sim.driver import ScriptedDriver
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv(track=track_name, image=True, image_size=(IMG_SIZE, IMG_SIZE))
    obs, _ = env.reset(seed=0)
    driver = ScriptedDriver(env.track)
    frames, floats = [obs["img"]], [obs["float"]]
    actions, speeds, rewards, terminated, truncated = [], [], [], [], []
    for _ in range(n_steps):
        action = driver.action(env.car)
        obs, reward, term, trunc, _ = env.step(action)
        actions.append(action)
        speeds.append(env.car.speed)
        rewards.append(reward)
        terminated.append(term)
        truncated.append(trunc)
        if term or trunc:
            obs, _ = env.reset()
            driver.reset()
        frames.append(obs["img"])
        floats.append(obs["float"])
    return {"frames": np.stack(frames), "floats": np.stack(floats).astype(np.float32),
            "actions": np.asarray(actions, np.int64), "speeds": np.asarray(speeds, np.float32),
            "rewards": np.asarray(rewards, np.float32), "terminated": np.asarray(terminated, bool),
            "truncated": np.asarray(truncated, bool)}


def rulka_bytes_per_transition(sim: dict[str, np.ndarray], segment_steps: int) -> dict[str, Any]:
    """Compress worker-layout segments of the driven transitions with rulka's compressors."""
    from rulka.compress import make_compressor
    from rulka.segment import Segment

    n = len(sim["actions"])
    out: dict[str, Any] = {"segment_steps": segment_steps, "float_input_dim": int(sim["floats"].shape[1]),
                           "layout": "obs/img uint8 64x64 (each frame once), obs/float float32 (the pipeline's), "
                                     "action int64, reward float32, terminated, truncated"}
    for name, with_floats in (("zstd", True), ("zstd_frames_only", False), ("none", True)):
        compressor = make_compressor(name.split("_")[0])
        total_bytes, total_steps, seconds = 0, 0, 0.0
        for start in range(0, n - segment_steps + 1, segment_steps):
            stop = start + segment_steps
            arrays = {"obs/img": sim["frames"][start:stop + 1],
                      "action": sim["actions"][start:stop], "reward": sim["rewards"][start:stop],
                      "terminated": sim["terminated"][start:stop], "truncated": sim["truncated"][start:stop]}
            if with_floats:
                arrays["obs/float"] = sim["floats"][start:stop + 1]
            seg = Segment(run_id="bench", worker_id="w1", episode_id=0, seq=start // segment_steps,
                          index_in_episode=start // segment_steps, first_step=start, policy_version=1,
                          arrays=arrays, map_name="default")
            t0 = time.perf_counter()
            payload = compressor.compress(seg)
            seconds += time.perf_counter() - t0
            total_bytes += len(payload)
            total_steps += segment_steps
        out[name] = {"bytes_per_transition": round(total_bytes / total_steps, 1),
                     "compress_ms_per_segment": round(1000 * seconds / max(total_steps // segment_steps, 1), 3)}
    return out


# -- TMRL install and child process --------------------------------------------------------------

def install_tmrl(target: Path) -> str | None:
    """pip-install TMRL (no deps) and its missing import-time dependencies into ``target``.
    Returns None on success, else pip's last error lines."""
    if (target / "tmrl" / "networking.py").is_file():
        return None
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
           "--target", str(target), f"tmrl=={TMRL_VERSION}", *TMRL_EXTRA_PACKAGES]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd)}: {exc}"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING: Location" not in ln]
        return f"`pip install --no-deps --target ... tmrl=={TMRL_VERSION}` failed: " + " / ".join(lines[-3:])
    return None


def tmrl_config(port: int, local_ports: list[int], tls: bool, keys_dir: str) -> dict[str, Any]:
    """A complete TMRL config.json for a loopback run (TMRL reads every key at import)."""
    return {
        "RUN_NAME": "rulka_peer_bench", "RESET_TRAINING": False, "BUFFERS_MAXLEN": 500000,
        "RW_MAX_SAMPLES_PER_EPISODE": 1000, "CUDA_TRAINING": False, "CUDA_INFERENCE": False,
        "VIRTUAL_GAMEPAD": False, "LOCALHOST_WORKER": True, "LOCALHOST_TRAINER": True,
        "PUBLIC_IP_SERVER": "127.0.0.1", "PASSWORD": "rulka-bench-only", "TLS": tls,
        "TLS_HOSTNAME": "default", "TLS_CREDENTIALS_DIRECTORY": keys_dir, "NB_WORKERS": -1,
        "WANDB_PROJECT": "none", "WANDB_ENTITY": "none", "WANDB_KEY": "none", "PORT": port,
        "LOCAL_PORT_SERVER": local_ports[0], "LOCAL_PORT_TRAINER": local_ports[1], "LOCAL_PORT_WORKER": local_ports[2],
        "BUFFER_SIZE": 536870912, "HEADER_SIZE": TMRL_HEADER_SIZE, "MAX_EPOCHS": 1, "ROUNDS_PER_EPOCH": 1,
        "TRAINING_STEPS_PER_ROUND": 1, "MAX_TRAINING_STEPS_PER_ENVIRONMENT_STEP": 4.0,
        "ENVIRONMENT_STEPS_BEFORE_TRAINING": 1000, "UPDATE_MODEL_INTERVAL": 200, "UPDATE_BUFFER_INTERVAL": 200,
        "SAVE_MODEL_EVERY": 0, "MEMORY_SIZE": 1000, "BATCH_SIZE": 32,
        "ALG": {"ALGORITHM": "SAC", "LEARN_ENTROPY_COEF": False, "LR_ACTOR": 1e-5, "LR_CRITIC": 5e-5,
                "LR_ENTROPY": 3e-4, "GAMMA": 0.995, "POLYAK": 0.995, "TARGET_ENTROPY": -0.5, "ALPHA": 0.01,
                "REDQ_N": 10, "REDQ_M": 2, "REDQ_Q_UPDATES_PER_POLICY_UPDATE": 20, "OPTIMIZER_ACTOR": "adam",
                "OPTIMIZER_CRITIC": "adam", "BETAS_ACTOR": [0.997, 0.997], "BETAS_CRITIC": [0.997, 0.997],
                "L2_ACTOR": 0.0, "L2_CRITIC": 0.0},
        "ENV": {"RTGYM_INTERFACE": "TM20FULL", "WINDOW_WIDTH": 256, "WINDOW_HEIGHT": 128,
                "IMG_WIDTH": IMG_SIZE, "IMG_HEIGHT": IMG_SIZE, "IMG_GRAYSCALE": True, "SLEEP_TIME_AT_RESET": 1.5,
                "IMG_HIST_LEN": IMG_HIST_LEN,
                "RTGYM_CONFIG": {"time_step_duration": 0.05, "start_obs_capture": 0.04,
                                 "time_step_timeout_factor": 1.0, "act_buf_len": 2, "benchmark": False,
                                 "wait_on_done": True, "ep_max_length": 1000,
                                 "interface_kwargs": {"save_replays": False}},
                "REWARD_CONFIG": {"END_OF_TRACK": 100.0, "CONSTANT_PENALTY": 0.0, "CHECK_FORWARD": 500,
                                  "CHECK_BACKWARD": 10, "FAILURE_COUNTDOWN": 10, "MIN_STEPS": 70,
                                  "MAX_STRAY": 100.0}},
        "__VERSION__": "0.6.0",
    }


def write_tls_credentials(folder: Path) -> None:
    """A self-signed certificate for hostname "default" (TMRL's TLS_HOSTNAME), as tlspyo expects."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "default")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("default")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.TraditionalOpenSSL,
                                                        serialization.NoEncryption()))
    (folder / "certificate.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_tmrl_home(home: Path) -> list[int]:
    """The ``TmrlData`` folders and a ``config.json`` (TMRL reads it at import) under ``home``, on
    free loopback ports; returns the ports (server, then the local ones)."""
    config_dir = home / "TmrlData" / "config"
    config_dir.mkdir(parents=True)
    for sub in ("checkpoints", "dataset", "reward", "weights"):
        (home / "TmrlData" / sub).mkdir()
    ports = [free_port() for _ in range(4)]
    (config_dir / "config.json").write_text(json.dumps(tmrl_config(ports[0], ports[1:], False, "")))
    return ports


def run_tmrl_child(tmrl_dir: Path, frames_file: Path, segment_steps: int, sizes: list[str], reps: dict[str, int],
                   timeout_s: float) -> dict[str, Any]:
    """Run the TMRL measurements in a child process with a throwaway HOME; returns its JSON."""
    with tempfile.TemporaryDirectory(prefix="rulka-tmrl-home-") as home:
        keys = Path(home) / "tls"
        write_tls_credentials(keys)
        make_tmrl_home(Path(home))
        job = {"tmrl_dir": str(tmrl_dir), "frames": str(frames_file), "segment_steps": segment_steps,
               "sizes": sizes, "reps": reps, "keys_dir": str(keys)}
        env = {**os.environ, "HOME": home, "USERPROFILE": home, "WANDB_MODE": "disabled"}
        env = child_env(env)
        # own process group: tlspyo forks helper processes, which must go with the child on a timeout
        proc = subprocess.Popen(child_command("bench.peer_tmrl", "--tmrl-child", json.dumps(job)), env=env, cwd=home,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"TMRL measurements took longer than {timeout_s:g} s"}
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers of our own group, if any
            except ProcessLookupError:
                pass
        for line in reversed(stdout.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        tail = [ln for ln in stderr.splitlines() if ln.strip()][-3:]
        return {"error": f"TMRL child exited with {proc.returncode}: " + " / ".join(tail)}


# -- inside the TMRL child -------------------------------------------------------------------------

def _tmrl_bytes_per_transition(job: dict[str, Any]) -> dict[str, Any]:
    from tmrl.custom.custom_memories import get_local_buffer_sample_tm20_imgs
    from tmrl.custom.tm.tm_preprocessors import obs_preprocessor_tm_act_in_obs
    from tmrl.networking import Buffer

    with np.load(job["frames"], allow_pickle=False) as data:
        frames, speeds, rewards = data["frames"], data["speeds"], data["rewards"]
    steps = int(job["segment_steps"])
    n = len(rewards)
    total_bytes, total_steps = 0, 0
    for start in range(0, n - steps + 1, steps):
        buffer = Buffer()
        for t in range(start, start + steps):
            hist = frames[max(0, t + 1 - IMG_HIST_LEN + 1):t + 2]
            while len(hist) < IMG_HIST_LEN:  # the episode's first steps repeat the first frame, as TMRL does
                hist = np.concatenate([hist[:1], hist])
            act = np.array([1.0, 0.0, 0.0], np.float32)
            raw_obs = (np.array([speeds[t] * 3.6], np.float32), np.array([3.0], np.float32),
                       np.array([6000.0], np.float32), hist, act, act)
            obs = obs_preprocessor_tm_act_in_obs(raw_obs)
            buffer.append_sample(get_local_buffer_sample_tm20_imgs(act, obs, float(rewards[t]), False, False, {}))
        # what tlspyo 0.3 puts on the wire for Endpoint.produce(buffer, "trainers") with its default
        # pickle serializer: the pickled object inside a pickled (stamp, cmd, dest, obj) 4-tuple,
        # after a fixed-size length header
        inner = pickle.dumps(buffer)
        wire = pickle.dumps((1, "PRODUCE", "trainers", inner))
        total_bytes += len(wire) + TMRL_HEADER_SIZE
        total_steps += steps
    return {"bytes_per_transition": round(total_bytes / total_steps, 1), "samples_per_buffer": steps,
            "layout": "newest 64x64 uint8 frame, speed/gear/rpm, previous action, reward, flags, info (pickled)"}


def _tmrl_relay(job: dict[str, Any], tls: bool) -> dict[str, Any]:
    from tlspyo import Endpoint
    from tmrl.networking import Server

    port, local_server, local_trainer, local_worker = (free_port() for _ in range(4))
    security = "TLS" if tls else None
    keys = job["keys_dir"] if tls else None
    server = Server(port=port, password="rulka-bench-only", local_port=local_server, header_size=TMRL_HEADER_SIZE,
                    security=security, keys_dir=keys, max_workers=None)
    common = {"ip_server": "127.0.0.1", "port": port, "password": "rulka-bench-only", "header_size": TMRL_HEADER_SIZE,
              "security": security, "keys_dir": keys, "hostname": "default"}
    trainer = Endpoint(groups="trainers", local_com_port=local_trainer, max_buf_len=536870912, **common)
    worker = Endpoint(groups="workers", local_com_port=local_worker, max_buf_len=536870912, **common)
    out: dict[str, Any] = {}
    try:
        trainer.notify(groups={"trainers": -1})
        # warm-up: a first message makes sure both endpoints are connected before timing
        worker.produce(b"x", "trainers")
        deadline = time.monotonic() + 60
        got = 0
        while not got and time.monotonic() < deadline:
            got = len(trainer.receive_all(blocking=False))
            if not got:
                trainer.notify(groups={"trainers": -1})
                time.sleep(0.05)
        if not got:
            return {"error": "the TMRL relay did not deliver a first message within 60 s"}
        for name in job["sizes"]:
            size = RELAY_SIZES[name]
            reps = int(job["reps"][name])
            received, seconds = tlspyo_throughput(worker, trainer, "trainers", size, reps)
            if received < reps:
                out[name] = {"error": f"{received}/{reps} messages arrived within 300 s"}
            else:
                out[name] = {"mb_per_s": round(reps * size / seconds / 1e6, 1), "messages": reps,
                             "seconds": round(seconds, 3)}
            trainer.notify(groups={"trainers": -1})
    finally:
        worker.stop()
        trainer.stop()
        server._Server__relay.stop()  # noqa: SLF001 - TMRL's Server has no public stop
    return out


def tmrl_child(job: dict[str, Any]) -> int:
    sys.path.append(job["tmrl_dir"])  # after rulka's environment: TMRL uses our numpy/torch/tlspyo
    import logging

    logging.disable(logging.WARNING)  # TMRL logs every buffer at INFO
    result: dict[str, Any] = {}
    import tmrl

    if job.get("pendulum"):
        _tmrl_pendulum(job)
        return 0
    result["tmrl_version"] = getattr(tmrl, "__version__", TMRL_VERSION)
    result["bytes"] = _tmrl_bytes_per_transition(job)
    for mode, tls in (("relay_tcp", False), ("relay_tls", True)):
        try:
            result[mode] = _tmrl_relay(job, tls)
        except Exception as exc:  # noqa: BLE001 - report, keep the other figures
            result[mode] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)
    return 0


# -- SAC on Pendulum, both pipelines ------------------------------------------------------------

PENDULUM_ID = "bench.recorded_pendulum:RecordedPendulum-v1"
PENDULUM_TARGET = -200.0
PENDULUM_WINDOW = 10


def episodes_summary(path: Path, start: float, target: float = PENDULUM_TARGET,
                     window: int = PENDULUM_WINDOW) -> dict[str, Any]:
    """From the episode lines ``bench.recorded_pendulum`` wrote: when the mean return of the last
    ``window`` episodes first reached ``target`` (seconds since ``start``, env steps)."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by the kill
    out: dict[str, Any] = {"episodes": len(rows), "env_steps": rows[-1]["steps"] if rows else 0,
                           "first_episode_s": round(rows[0]["t"] - start, 1) if rows else None}
    best = -math.inf
    for i in range(window - 1, len(rows)):
        mean = float(np.mean([r["return"] for r in rows[i - window + 1:i + 1]]))
        best = max(best, mean)
        if mean >= target and "seconds_to_target" not in out:
            out.update(seconds_to_target=round(rows[i]["t"] - start, 1), env_steps_to_target=rows[i]["steps"],
                       mean_return_at_target=round(mean, 1))
    if rows:
        out["best_mean_return"] = round(best, 1) if best > -math.inf else None
        out["last_mean_return"] = round(float(np.mean([r["return"] for r in rows[-window:]])), 1)
    return out


def _kill_leftovers(marker: str) -> int:
    """SIGKILL processes whose command line contains ``marker`` (a run's temp folder): roles that
    outlived the command we started (Linux /proc; elsewhere nothing is found)."""
    killed = 0
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(proc_dir.name) != os.getpid():
            try:
                os.kill(int(proc_dir.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def _race(cmd: list[str], env: dict[str, str], cwd: str, episodes: Path, budget_s: float,
          stop_signal: int) -> dict[str, Any]:
    """Launch ``cmd``, stop it once the target is reached or after ``budget_s``; summary of its episodes."""
    start = time.time()
    log = episodes.with_suffix(".stderr")
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    try:
        while proc.poll() is None and time.time() - start < budget_s:
            time.sleep(2.0)
            if "seconds_to_target" in episodes_summary(episodes, start):
                break
    finally:
        exited = proc.poll()
        if exited is None:
            os.killpg(proc.pid, stop_signal)
            try:
                proc.wait(timeout=150)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers of its own group
        except ProcessLookupError:
            pass
        proc.wait()
    out = episodes_summary(episodes, start)
    out["budget_s"] = budget_s
    out["leftover_processes_killed"] = _kill_leftovers(str(episodes.parent))
    if exited not in (None, 0):
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        out["error"] = f"exited with {exited}: " + " / ".join(tail)
    return out


def race_tmrl_pendulum(tmrl_dir: Path, budget_s: float) -> dict[str, Any]:
    """TMRL's minimal Pendulum pipeline in a child process with a throwaway HOME."""
    with tempfile.TemporaryDirectory(prefix="rulka-tmrl-pendulum-") as home:
        ports = make_tmrl_home(Path(home))
        episodes = Path(home) / "episodes.jsonl"
        env = {**os.environ, "HOME": home, "USERPROFILE": home, "WANDB_MODE": "disabled",
               "RULKA_BENCH_EPISODES": str(episodes)}
        env = child_env(env)
        job = {"tmrl_dir": str(tmrl_dir), "port": ports[0], "pendulum": True}
        return _race(child_command("bench.peer_tmrl", "--tmrl-child", json.dumps(job)), env, home, episodes, budget_s,
                     signal.SIGKILL)


def race_rulka_pendulum(budget_s: float) -> dict[str, Any]:
    """``rulka run configs/pendulum_sac.yaml --workers 1`` with the recorded env."""
    with tempfile.TemporaryDirectory(prefix="rulka-pendulum-") as tmp:
        episodes = Path(tmp) / "episodes.jsonl"
        env = {**os.environ, "WANDB_MODE": "disabled", "RULKA_BENCH_EPISODES": str(episodes)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "rulka.cli", "run", str(REPO_ROOT / "configs" / "pendulum_sac.yaml"),
               "--workers", "1", "--minutes", str(budget_s / 60), "--run-dir", str(Path(tmp) / "run"),
               "--set", f"environment.gym_id={PENDULUM_ID}", "--set", "logging.tensorboard.enabled=false",
               "--set", "logging.progress=never"]
        return _race(cmd, env, str(REPO_ROOT), episodes, budget_s, signal.SIGINT)


def _tmrl_pendulum(job: dict[str, Any]) -> None:
    """TMRL's minimal Pendulum pipeline (its tutorial's classes and settings); runs until killed."""
    import threading

    import tmrl.config.config_constants as cfg
    from tmrl.custom.custom_algorithms import SpinupSacAgent
    from tmrl.custom.custom_memories import GenericTorchMemory
    from tmrl.custom.custom_models import MLPActorCritic, SquashedGaussianMLPActor
    from tmrl.envs import GenericGymEnv
    from tmrl.networking import RolloutWorker, Server, Trainer
    from tmrl.training_offline import TorchTrainingOffline
    from tmrl.util import partial

    env_cls = partial(GenericGymEnv, id=PENDULUM_ID, gym_kwargs={"render_mode": None})
    probe = env_cls()
    spaces = (probe.observation_space, probe.action_space)
    port = int(job["port"])
    server = Server(security=None, password=cfg.PASSWORD, port=port)  # stops its relay when collected
    weights = cfg.WEIGHTS_FOLDER
    worker = RolloutWorker(env_cls=env_cls, actor_module_cls=partial(SquashedGaussianMLPActor), sample_compressor=None,
                           device="cpu", server_ip="127.0.0.1", server_port=port, password=cfg.PASSWORD,
                           max_samples_per_episode=1000, model_path=str(weights / "pendulum.tmod"), model_history=-1)
    training = partial(
        TorchTrainingOffline, env_cls=spaces,
        memory_cls=partial(GenericTorchMemory, memory_size=1e6, batch_size=32),
        training_agent_cls=partial(SpinupSacAgent, model_cls=MLPActorCritic, gamma=0.99, polyak=0.995, alpha=0.2,
                                   lr_actor=1e-3, lr_critic=1e-3, lr_entropy=1e-3, learn_entropy_coef=True,
                                   target_entropy=None),
        epochs=2, rounds=10, steps=1000, update_buffer_interval=1, update_model_interval=1,
        max_training_steps_per_env_step=0.2, start_training=100, device=None)
    trainer = Trainer(training_cls=training, server_ip="127.0.0.1", server_port=port, password=cfg.PASSWORD,
                      model_path=str(weights / "pendulum_t.tmod"),
                      checkpoint_path=str(cfg.CHECKPOINTS_FOLDER / "pendulum_t.tcpt"))
    threading.Thread(target=worker.run_synchronous, kwargs={"test_episode_interval": 10, "initial_steps": 100,
                                                             "max_steps_per_update": 10, "end_episodes": True},
                     daemon=True).start()
    trainer.run()
    del server


def pendulum_main(tmrl_dir: Path, minutes: float) -> dict[str, Any]:
    budget = minutes * 60
    result: dict[str, Any] = {"task": f"SAC on Pendulum-v1, 1 worker; target: mean of the last {PENDULUM_WINDOW} "
                                      f"episode returns >= {PENDULUM_TARGET:g}",
                              "budget_s_each": budget}
    error = install_tmrl(tmrl_dir)
    result["tmrl"] = {"error": error} if error else race_tmrl_pendulum(tmrl_dir, budget)
    result["rulka"] = race_rulka_pendulum(budget)
    t, r = result["tmrl"].get("seconds_to_target"), result["rulka"].get("seconds_to_target")
    if t and r:
        result["tmrl_over_rulka_seconds"] = round(t / r, 2)
        result["tmrl_over_rulka_env_steps"] = round(result["tmrl"]["env_steps_to_target"]
                                                    / result["rulka"]["env_steps_to_target"], 2)
    result["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                         "load_avg_1m_at_end": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None}
    result["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return result


# -- main ----------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer transitions and messages, no 26 MB messages")
    parser.add_argument("--tmrl-dir", type=Path, default=Path(tempfile.gettempdir()) / f"rulka-bench-tmrl-{TMRL_VERSION}",
                        help="where TMRL is (or gets) installed with pip --target")
    parser.add_argument("--segment-steps", type=int, default=None,
                        help="transitions per segment/buffer (default: the worker's segment_max_steps)")
    parser.add_argument("--pendulum", action="store_true", help="race SAC on Pendulum-v1: TMRL's pipeline vs rulka's")
    parser.add_argument("--minutes", type=float, default=6.0, help="--pendulum: time budget of each pipeline")
    parser.add_argument("--tmrl-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tmrl_child is not None:
        return tmrl_child(json.loads(args.tmrl_child))
    if args.pendulum:
        print(json.dumps(pendulum_main(args.tmrl_dir, args.minutes)))
        return 0

    segment_steps = args.segment_steps or 200
    if args.segment_steps is None:
        try:
            from rulka.config import load_config

            segment_steps = int(load_config(None, env_file=None).worker.segment_max_steps)
        except Exception:  # noqa: BLE001, S110 - keep the documented default of 200
            pass
    n_steps = segment_steps * (3 if args.quick else 10)
    sim = drive_sim(n_steps)
    result: dict[str, Any] = {
        "transitions": n_steps,
        "frames": f"{IMG_SIZE}x{IMG_SIZE} grayscale uint8 from rulka's simulator (scripted driver, default track), "
                  f"history {IMG_HIST_LEN}",
        "target_rulka_bytes_per_transition": 1536,
        "rulka": rulka_bytes_per_transition(sim, segment_steps),
    }
    error = install_tmrl(args.tmrl_dir)
    if error:
        result["tmrl"] = {"installed": False, "error": error}
    else:
        sizes = ["64KB", "1MB"] if args.quick else ["64KB", "1MB", "26MB"]
        reps = {"64KB": 50 if args.quick else 200, "1MB": 10 if args.quick else 40, "26MB": 2}
        with tempfile.TemporaryDirectory(prefix="rulka-tmrl-frames-") as tmp:
            frames_file = Path(tmp) / "frames.npz"
            np.savez(frames_file, frames=sim["frames"], speeds=sim["speeds"], rewards=sim["rewards"])
            tmrl = run_tmrl_child(args.tmrl_dir, frames_file, segment_steps, sizes, reps,
                                  timeout_s=300 if args.quick else 800)
        result["tmrl"] = {"installed": "error" not in tmrl or "bytes" in tmrl, **tmrl}
    zstd = result["rulka"]["zstd"]["bytes_per_transition"]
    result["rulka_meets_target"] = zstd <= result["target_rulka_bytes_per_transition"]
    tmrl_bytes = result["tmrl"].get("bytes", {}).get("bytes_per_transition")
    if tmrl_bytes:
        result["tmrl_over_rulka_bytes"] = round(tmrl_bytes / zstd, 2)
    result["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}
    result["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
