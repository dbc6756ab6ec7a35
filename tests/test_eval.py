"""``rulka eval``: greedy evaluation of saved policies on CartPole and on the simulator, videos,
``--compare``, and damaged policy files (one-line errors, non-zero exit, never a traceback)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from rulka.agents.simple import SimpleDQNActor
from rulka.cli import main
from rulka.config import load_config, save_resolved
from rulka.envs.sim.env import SimTrackEnv
from rulka.envs.sim.policy import save_policy
from rulka.interfaces import ActorModule

REPO = Path(__file__).resolve().parents[1]
CARTPOLE_SPEC = {"actor": "simple_dqn", "kwargs": {"obs_dim": 4, "n_actions": 2, "hidden": 32}}


def _pole_controller(obs: np.ndarray) -> np.ndarray:
    """A hand-tuned linear controller that balances CartPole-v1 for 500 steps: push towards the
    side the pole falls to (angle and angular velocity first, cart position and speed a little)."""
    return (obs[..., 2] + 0.5 * obs[..., 3] + 0.05 * obs[..., 0] + 0.2 * obs[..., 1] > 0).astype(np.int64)


def _run_folder(path: Path, actor: SimpleDQNActor) -> Path:
    """A run folder as rulka-trainer leaves it: config.resolved.yaml and weights/policy.safetensors."""
    (path / "weights").mkdir(parents=True)
    save_resolved(load_config(REPO / "configs" / "cartpole_simple.yaml", env_file=None), path)
    save_policy(path / "weights" / "policy.safetensors", actor.get_weights(), CARTPOLE_SPEC)
    return path


@pytest.fixture(scope="module")
def cartpole_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(trained, random) CartPole run folders with the simple DQN actor. 'Trained': the Q-network
    fitted (cross-entropy on its Q-values, 2 s of CPU) to imitate ``_pole_controller`` on random
    states; 'random': the same network freshly initialised."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    states = rng.uniform([-2.4, -3, -0.21, -3], [2.4, 3, 0.21, 3], size=(4000, 4)).astype(np.float32)
    x, y = torch.from_numpy(states), torch.from_numpy(_pole_controller(states))
    trained = SimpleDQNActor(**CARTPOLE_SPEC["kwargs"])
    opt = torch.optim.Adam(trained.net.parameters(), lr=1e-2)
    for _ in range(200):
        loss = torch.nn.functional.cross_entropy(trained.net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (trained.net(x).argmax(1) == y).float().mean() > 0.97
    untrained = SimpleDQNActor(**CARTPOLE_SPEC["kwargs"])
    root = tmp_path_factory.mktemp("cartpole")
    return _run_folder(root / "trained", trained), _run_folder(root / "random", untrained)


def _eval_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_trained_cartpole_policy_balances_and_random_one_falls(cartpole_runs, capsys):
    trained, random_ = cartpole_runs
    good = _eval_json(capsys, str(trained), "--episodes", "5")
    bad = _eval_json(capsys, str(random_ / "weights" / "policy.safetensors"), "--episodes", "5")
    assert good["env"] == bad["env"] == "gym CartPole-v1"  # from the run's config.resolved.yaml
    assert good["episodes"] == 5 and len(good["episode_results"]) == 5
    assert good["overall"]["return_mean"] >= 450
    assert bad["overall"]["return_mean"] < 100
    # CartPole's reward is 1 per step: the return is the episode length
    assert [e["episode_return"] for e in good["episode_results"]] == [e["length"] for e in good["episode_results"]]
    assert "finish_rate" not in good["overall"]  # CartPole has no finish line


def test_same_seed_same_result_and_text_table(cartpole_runs, capsys):
    _, random_ = cartpole_runs
    a = _eval_json(capsys, str(random_), "--episodes", "3", "--seed", "7")
    b = _eval_json(capsys, str(random_), "--episodes", "3", "--seed", "7")
    assert a["episode_results"] == b["episode_results"]
    assert main(["eval", str(random_), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    mean, std = a["overall"]["return_mean"], a["overall"]["return_std"]
    assert "3 greedy episodes" in out and "gym CartPole-v1" in out
    assert re.search(r"\d+\.\d ± \d+\.\d", out)
    assert mean is not None and std is not None


def test_compare_puts_both_policies_side_by_side(cartpole_runs, capsys):
    trained, random_ = cartpole_runs
    both = _eval_json(capsys, str(trained), "--compare", str(random_), "--episodes", "2")
    a, b = both["policies"]
    assert a["overall"]["return_mean"] > 4 * b["overall"]["return_mean"]
    assert main(["eval", str(trained), "--compare", str(random_), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "[A]" in out and "[B]" in out and str(random_) in out


def test_a_run_folder_evaluates_its_best_policy_and_final_weights_one_flag_away(cartpole_runs, capsys, tmp_path):
    """A run keeps its best policy in best/ (rulka.trainer.best): ``rulka eval RUN`` drives it,
    ``--final`` the weights at the end of the run (weights/). Here best/ balances, weights/ falls."""
    trained, random_ = cartpole_runs
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / "weights").mkdir()
    for name in ("config.resolved.yaml",):
        (run / name).write_bytes((trained / name).read_bytes())
    (run / "best" / "policy.safetensors").write_bytes((trained / "weights" / "policy.safetensors").read_bytes())
    (run / "weights" / "policy.safetensors").write_bytes((random_ / "weights" / "policy.safetensors").read_bytes())
    best = _eval_json(capsys, str(run), "--episodes", "3")
    assert best["policy"] == str(run / "best" / "policy.safetensors") and best["overall"]["return_mean"] >= 450
    final = _eval_json(capsys, str(run), "--episodes", "3", "--final")
    assert final["policy"] == str(run / "weights" / "policy.safetensors") and final["overall"]["return_mean"] < 100
    assert final["env"] == best["env"] == "gym CartPole-v1"  # the run's config for both
    # a run that kept no best policy: its final weights, and a note that says so
    plain = _eval_json(capsys, str(random_), "--episodes", "1")
    assert plain["policy"] == str(random_ / "weights" / "policy.safetensors")
    assert main(["eval", str(random_), "--episodes", "1"]) == 0
    assert "kept no best policy" in capsys.readouterr().err


def test_env_override_with_other_observations_is_a_one_line_error(cartpole_runs, capsys):
    trained, _ = cartpole_runs
    assert main(["eval", str(trained), "--env", "Acrobot-v1", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the policy cannot act on this env's observations") and err.count("\n") == 1


# -- the simulator ---------------------------------------------------------------------------------
class ReplayActor(ActorModule):
    """Plays back a recorded action sequence (its 'weights'), from the start at each reset."""

    def __init__(self) -> None:
        self.actions = np.zeros(0, dtype=np.int64)
        self.t = 0

    def reset(self) -> None:
        self.t = 0

    def act(self, obs: Any, test: bool = False) -> int:
        assert test and set(obs) == {"float"}  # greedy, float-only as its config says
        a = int(self.actions[min(self.t, len(self.actions) - 1)])
        self.t += 1
        return a

    def load_weights(self, weights: Any) -> None:
        self.actions = np.asarray(weights["actions"], dtype=np.int64)

    def get_weights(self) -> dict[str, Any]:
        return {"actions": self.actions}


@pytest.fixture(scope="module")
def sim_policy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A policy file that replays the scripted driver's actions on slalom (seed 0), carrying its
    run config the way rulka-trainer writes it; and the driver's race time there."""
    from rulka.envs.sim.driver import ScriptedDriver

    env = SimTrackEnv(track="slalom", image=False)
    env.reset(seed=0)
    driver = ScriptedDriver(env.track)
    actions, info = [], {}
    for _ in range(2000):
        actions.append(driver.action(env.car))
        _, _, terminated, truncated, info = env.step(actions[-1])
        if terminated or truncated:
            break
    assert info["finished"]
    path = tmp_path_factory.mktemp("sim") / "replay.safetensors"
    run_config = {"environment": {"track": "slalom"}, "nn": {"vis": {"no_image": True}}}
    save_policy(path, {"actions": np.asarray(actions, np.int64)},
                {"actor": "test_eval:ReplayActor", "kwargs": {}, "run_config_json": json.dumps(run_config)})
    return path, int(info["race_time_ms"])


def test_sim_race_time_equals_sim_render(sim_policy, capsys, tmp_path):
    path, driver_ms = sim_policy
    result = _eval_json(capsys, str(path), "--episodes", "2")
    assert result["env"] == "sim (slalom)"
    row = result["maps"]["slalom"]
    assert row["finish_rate"] == 1.0 and row["race_time_ms_mean"] == driver_ms and row["race_time_ms_std"] == 0
    assert row["reference_time_ms"] > 0
    assert main(["sim", "render", "--policy", str(path), "--no-animation", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"slalom: policy finished in {driver_ms / 1000:.2f} s" in out  # the policy's own track


def test_sim_race_time_as_a_ratio_to_the_solver_beside_the_driver(sim_policy, capsys, tmp_path, monkeypatch):
    """On the simulator each map shows the solver's time (``rulka sim optimal``, the shipped table
    at the policy's decision period) and the race time and the scripted driver's as ratios to it;
    a map the table lacks says so."""
    from rulka.envs.sim import optimal

    path, driver_ms = sim_policy
    opt = optimal.solver_time_ms("slalom", 50)
    assert opt is not None and opt < driver_ms
    result = _eval_json(capsys, str(path), "--episodes", "1")
    row = result["maps"]["slalom"]
    assert result["solver_ms_per_action"] == 50 and row["optimal_time_ms"] == opt
    assert row["race_time_mean_over_optimal"] == row["race_time_best_over_optimal"] == round(driver_ms / opt, 4)
    assert row["reference_over_optimal"] == round(row["reference_time_ms"] / opt, 4)
    assert main(["eval", str(path), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "solver" in out and "x solver" in out and f"{opt / 1000:.2f} s" in out and f"{driver_ms / opt:.3f}" in out
    empty = tmp_path / "times.json"
    empty.write_text(json.dumps({"format": optimal.SOLVER_TIMES_FORMAT, "times": {"50": {}}}), encoding="utf-8")
    monkeypatch.setattr(optimal, "SOLVER_TIMES_FILE", empty)
    assert main(["eval", str(path), "--episodes", "1"]) == 0
    assert "no solver time on record for slalom at 50 ms decisions" in capsys.readouterr().out
    assert _eval_json(capsys, str(path), "--episodes", "1")["maps"]["slalom"]["optimal_time_ms"] is None


def test_start_noise_moves_the_sim_start_and_is_refused_elsewhere(sim_policy, cartpole_runs, capsys):
    """--start-noise: the simulator repeats a greedy race from the line exactly; from moved starts
    (drawn from each episode's seed) the same actions drive other races, the same ones each time."""
    path, driver_ms = sim_policy
    result = _eval_json(capsys, str(path), "--episodes", "3", "--start-noise", "1.0")
    assert result["start_noise"] == 1.0
    eps = result["episode_results"]
    assert any(not e["finished"] or e["race_time_ms"] != driver_ms for e in eps), eps
    assert _eval_json(capsys, str(path), "--episodes", "3", "--start-noise", "1.0")["episode_results"] == eps
    assert main(["eval", str(path), "--episodes", "1", "--start-noise", "1.0"]) == 0
    assert "1 greedy episode, seed 0, starts moved up to 1 m and 1 degrees" in capsys.readouterr().out
    trained, _ = cartpole_runs
    assert main(["eval", str(trained), "--episodes", "1", "--start-noise", "0.3"]) == 2
    err = capsys.readouterr().err
    assert "--start-noise moves the simulator's start" in err and err.count("\n") == 1
    assert main(["eval", str(path), "--start-noise", "-1"]) == 2


def test_sim_video_is_camera_and_map_plus_driven_line(sim_policy, capsys, tmp_path):
    path, _ = sim_policy
    assert main(["eval", str(path), "--episodes", "1", "--max-steps", "40", "--video", str(tmp_path)]) == 0
    gif, png = tmp_path / "slalom_policy.gif", tmp_path / "slalom_policy.png"
    frames = imageio.mimread(gif)
    assert len(frames) == 41  # every action plus the start
    height, width = frames[0].shape[:2]
    assert height == 256 and width > 256 + 256  # the camera view beside the 256x256 map
    assert png.is_file()
    assert "stopped at --max-steps" in capsys.readouterr().out


class BlinkEnv(gym.Env):
    """A tiny env with an ``rgb_array`` renderer: the frame's red level is the step count."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = gym.spaces.Box(0, 10, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.render_mode = render_mode
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.full(4, self.t, np.float32), float(action), self.t >= 6, False, {}

    def render(self) -> np.ndarray:
        frame = np.zeros((32, 48, 3), np.uint8)
        frame[..., 0] = 40 * self.t
        return frame


def test_video_of_any_gym_env_that_renders_rgb_array(cartpole_runs, capsys, tmp_path):
    gym.register("rulka_test/Blink-v0", entry_point=BlinkEnv)
    _, random_ = cartpole_runs
    assert main(["eval", str(random_), "--env", "rulka_test/Blink-v0", "--episodes", "1",
                 "--video", str(tmp_path), "--video-format", "gif"]) == 0
    frames = imageio.mimread(tmp_path / "gym_rulka_test_Blink-v0_policy.gif")
    assert [int(f[0, 0, 0]) for f in frames] == [40 * t for t in range(7)]


# -- damaged policy files --------------------------------------------------------------------------
def _damaged(kind: str, tmp_path: Path, good: Path) -> Path:
    path = tmp_path / "policy.safetensors"
    data = good.read_bytes()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "pickle":
        path.write_bytes(b"\x80\x04\x95" + data[:200])
    elif kind == "no_spec":
        from safetensors.numpy import save_file

        save_file({"w": np.zeros(3, np.float32)}, str(path))
    elif kind == "spec_not_json":
        from safetensors.numpy import save_file

        save_file({"w": np.zeros(3, np.float32)}, str(path), metadata={"actor_spec": "{not json"})
    elif kind == "unknown_actor":
        save_policy(path, {"w": np.zeros(3, np.float32)}, {"actor": "no_such_actor", "kwargs": {}})
    elif kind == "bad_kwargs":
        save_policy(path, {"w": np.zeros(3, np.float32)}, {"actor": "simple_dqn", "kwargs": {"nope": 1}})
    elif kind == "wrong_shapes":
        other = SimpleDQNActor(obs_dim=4, n_actions=2, hidden=8)
        save_policy(path, other.get_weights(), CARTPOLE_SPEC)
    elif kind == "missing_tensor":
        weights = SimpleDQNActor(**CARTPOLE_SPEC["kwargs"]).get_weights()
        weights.pop(next(iter(weights)))
        save_policy(path, weights, CARTPOLE_SPEC)
    elif kind == "missing":
        return tmp_path / "nothing-here"
    return path


DAMAGE = ["empty", "truncated", "garbage", "pickle", "no_spec", "spec_not_json", "unknown_actor",
          "bad_kwargs", "wrong_shapes", "missing_tensor", "missing"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_policy_file_is_a_one_line_error(kind, cartpole_runs, capsys, tmp_path):
    good = cartpole_runs[0] / "weights" / "policy.safetensors"
    path = _damaged(kind, tmp_path, good)
    assert main(["eval", str(path), "--episodes", "1", "--env", "CartPole-v1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err


def test_damaged_policy_from_the_installed_command_exits_non_zero_without_traceback(tmp_path):
    path = tmp_path / "policy.safetensors"
    path.write_bytes(b"\x00" * 100)
    proc = subprocess.run([sys.executable, "-m", "rulka.cli", "eval", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot read policy file") and "Traceback" not in proc.stderr


# -- every learner's policy, as rulka-trainer writes it --------------------------------------------
class _NoMetrics:
    def log(self, metrics: dict, step: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("config", ["cartpole_simple.yaml", "cartpole_iqn.yaml", "cartpole_ppo.yaml"])
def test_eval_reads_what_the_trainer_writes_for_every_learner(config, tmp_path, capsys):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    cfg = load_config(REPO / "configs" / config, env_file=None)
    trainer = Trainer(cfg, LocalHub().trainer_link(), run_dir=tmp_path / "run",
                      signing_key=Ed25519PrivateKey.generate(), metrics=_NoMetrics())
    trainer.checkpoint()  # writes weights/policy.safetensors beside config.resolved.yaml
    trainer.close()
    result = _eval_json(capsys, str(tmp_path / "run"), "--episodes", "2")
    assert result["env"] == "gym CartPole-v1" and result["episodes"] == 2
    assert result["actor"] == trainer.agent.actor_spec()["actor"]
    assert all(e["length"] == e["episode_return"] > 0 for e in result["episode_results"])
