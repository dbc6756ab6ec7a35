"""Wire your own env, policy, compressor, memory and learner into rulka, in one script.

In the spirit of the TMRL tutorial: the env is a real-time one (rtgym's ``DummyRCDrone``, a
simulated remote-control drone that answers with delays, run by a ``RealTimeGymInterface`` written
here), and every plugin rulka needs is a small class below:

- ``DroneInterface``  - rtgym interface: fly the drone to a random target in real time;
- ``GainActor``       - the policy workers run (``ActorModule``): velocity = gain * (target - pos);
- ``Float16Compressor`` - a ``SampleCompressor`` that keeps floats as float16 (lossy on purpose,
  to show the hook; verify mode would flag it) and zlib-compresses;
- ``EpisodeMemory``   - a trajectory memory (``Memory``): hands whole episodes to the learner;
- ``GainSearchAgent`` - a ``TrainingAgent`` doing a noisy hill-climb on the gain from returns.

``run_local`` runs the trainer and the workers as threads of this process (the same classes as
the distributed roles; pass ``Trainer``/``Worker`` your own links to spread them over machines).

    python examples/custom_pipeline.py --updates 10
"""

from __future__ import annotations

import argparse
import warnings
import zlib
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from rtgym import DEFAULT_CONFIG_DICT, DummyRCDrone, RealTimeGymInterface

from rulka.errors import BadInput
from rulka.interfaces import ActorModule, Memory, SampleCompressor, TrainingAgent
from rulka.local import run_local
from rulka.segment import Segment, pack, segment_from_plain, segment_to_plain, unpack


# -- the env ------------------------------------------------------------------------------------
class DroneInterface(RealTimeGymInterface):
    """Observation: drone position (x, y) and target (x, y); action: velocity (vx, vy)."""

    def __init__(self, episode_steps: int = 40) -> None:
        self.drone: DummyRCDrone | None = None
        self.target = np.zeros(2, np.float32)
        self.episode_steps = episode_steps
        self.t = 0

    def get_observation_space(self) -> spaces.Tuple:
        box = spaces.Box(-1.0, 1.0, (2,), np.float32)
        return spaces.Tuple((box, box))

    def get_action_space(self) -> spaces.Box:
        return spaces.Box(-2.0, 2.0, (2,), np.float32)

    def get_default_action(self) -> np.ndarray:
        return np.zeros(2, np.float32)

    def send_control(self, control: np.ndarray) -> None:
        if control is not None:
            self.drone.send_control(float(control[0]), float(control[1]))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[list, dict]:
        if self.drone is None:
            self.drone = DummyRCDrone()
        self.target = np.random.default_rng(seed).uniform(-0.5, 0.5, 2).astype(np.float32)
        self.t = 0
        return [self._pos(), self.target.copy()], {}

    def wait(self) -> None:
        self.send_control(self.get_default_action())

    def _pos(self) -> np.ndarray:
        return np.asarray(self.drone.get_observation(), np.float32)

    def get_obs_rew_terminated_info(self) -> tuple[list, float, bool, dict]:
        self.t += 1
        pos = self._pos()
        reward = -float(np.linalg.norm(pos - self.target))
        return [pos, self.target.copy()], reward, self.t >= self.episode_steps, {}


class NamedObs(gymnasium.ObservationWrapper):
    """rtgym returns a tuple (position, target, last action); name its parts so they travel as
    ``obs/pos``, ``obs/target`` and ``obs/last_action``."""

    def observation(self, obs: tuple) -> dict[str, np.ndarray]:
        return {"pos": np.asarray(obs[0], np.float32), "target": np.asarray(obs[1], np.float32),
                "last_action": np.asarray(obs[2], np.float32)}


def make_drone_env(time_step_s: float = 0.02, episode_steps: int = 40) -> gymnasium.Env:
    config = dict(DEFAULT_CONFIG_DICT)
    config.update({"interface": DroneInterface, "interface_kwargs": {"episode_steps": episode_steps},
                   "time_step_duration": time_step_s, "start_obs_capture": time_step_s,
                   "time_step_timeout_factor": 1.0, "ep_max_length": episode_steps + 1, "act_buf_len": 1,
                   "reset_act_buf": True, "wait_on_done": True})
    env = gymnasium.make("real-time-gym-v1", config=config, disable_env_checker=True)
    env.observation_space = spaces.Dict({})  # the wrapper below changes the layout
    return NamedObs(env)


# -- the worker side ----------------------------------------------------------------------------
class GainActor(ActorModule):
    """velocity = gain * (target - position), plus exploration noise unless ``test``."""

    def __init__(self, noise: float = 0.1) -> None:
        self.gain = torch.tensor([0.5])
        self.noise = noise
        self.rng = np.random.default_rng()

    def act(self, obs: dict[str, np.ndarray], test: bool = False) -> np.ndarray:
        action = float(self.gain[0]) * (obs["target"] - obs["pos"])
        if not test:
            action = action + self.rng.normal(0, self.noise, 2)
        return np.clip(action, -2.0, 2.0).astype(np.float32)

    def load_weights(self, weights: Any) -> None:
        self.gain = torch.as_tensor(weights["gain"]).float().clone()

    def get_weights(self) -> dict[str, torch.Tensor]:
        return {"gain": self.gain.clone()}


class Float16Compressor(SampleCompressor):
    """float32 arrays travel as float16, then zlib. Lossy: fine for this toy, and the point of
    rulka's verify mode is to catch exactly this kind of choice when it matters."""

    def compress(self, segment: Segment) -> bytes:
        arrays = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in segment.arrays.items()}
        plain = segment_to_plain(Segment(**{**segment.__dict__, "arrays": arrays}))
        return zlib.compress(pack(plain), 6)

    def decompress(self, data: bytes) -> Segment:
        try:
            raw = zlib.decompressobj().decompress(data, 64 << 20)
        except zlib.error as exc:
            raise BadInput("segment", f"zlib: {exc}") from None
        seg = segment_from_plain(unpack(raw))
        seg.arrays = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in seg.arrays.items()}
        return seg


# -- the trainer side ---------------------------------------------------------------------------
class EpisodeMemory(Memory):
    """Collects whole episodes; ``take()`` hands over ``episodes_per_batch`` of them with the
    policy version that collected each (on-policy learners want to know)."""

    def __init__(self, episodes_per_batch: int = 4) -> None:
        self.episodes_per_batch = episodes_per_batch
        self.partial: dict[tuple[str, int], list[Segment]] = {}
        self.done: list[list[Segment]] = []
        self.transitions = 0

    def append(self, segment: Segment) -> int:
        key = (segment.worker_id, segment.episode_id)
        self.partial.setdefault(key, []).append(segment)
        if segment.episode_done:
            self.done.append(self.partial.pop(key))
        self.transitions += segment.num_transitions
        return segment.num_transitions

    def __len__(self) -> int:
        return self.transitions

    def ready(self) -> bool:
        return len(self.done) >= self.episodes_per_batch

    def take(self) -> list[dict[str, Any]]:
        batch, self.done = self.done[: self.episodes_per_batch], self.done[self.episodes_per_batch:]
        return [{"return": float(sum(s.arrays["reward"].sum() for s in ep)),
                 "version": ep[0].policy_version} for ep in batch]

    def rebuild_transitions(self, segment: Segment) -> list[dict[str, np.ndarray]]:
        a = segment.arrays
        obs = [{k[4:]: a[k][i] for k in a if k.startswith("obs/")} for i in range(segment.num_transitions + 1)]
        return [{"obs": obs[i], "action": a["action"][i], "reward": a["reward"][i], "next_obs": obs[i + 1],
                 "done": a["terminated"][i]} for i in range(segment.num_transitions)]


class GainSearchAgent(TrainingAgent):
    """Hill-climbing on the gain: keep the best gain seen, try a perturbation of it next."""

    def __init__(self, step: float = 0.3, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.step = step
        self.current = 0.5
        self.best, self.best_return = 0.5, -np.inf

    def train(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        mean_return = float(np.mean([ep["return"] for ep in batch]))
        if mean_return > self.best_return:
            self.best, self.best_return = self.current, mean_return
        self.current = float(np.clip(self.best + self.rng.normal(0, self.step), 0.0, 5.0))
        return {"charts/episodic_return": mean_return, "charts/gain": self.current}

    def get_actor(self) -> GainActor:
        actor = GainActor()
        actor.load_weights({"gain": torch.tensor([self.current])})
        return actor

    def actor_spec(self) -> dict[str, Any]:
        return {"actor": "__main__:GainActor", "kwargs": {}}

    def state_dict(self) -> dict[str, Any]:
        return {"current": self.current, "best": self.best, "best_return": self.best_return}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current, self.best, self.best_return = state["current"], state["best"], state["best_return"]


def main() -> None:
    parser = argparse.ArgumentParser(description="rulka with a custom rtgym env and custom plugins, one process")
    parser.add_argument("--updates", type=int, default=10, help="learner updates to run")
    parser.add_argument("--workers", type=int, default=2, help="worker threads")
    parser.add_argument("--time-step", type=float, default=0.02, help="real-time step of the drone env (s)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # on a busy machine a real-time step sometimes runs late; rtgym warns each time
    warnings.filterwarnings("ignore", message="Time-step timed out")
    cfg = {"worker": {"segment_max_steps": 20}, "trainer": {"publish_every_updates": 1}}
    agent = GainSearchAgent()
    result = run_local(
        cfg, n_workers=args.workers, max_updates=args.updates, max_seconds=300,
        agent=agent, memory=EpisodeMemory(),
        env_factory=lambda i: make_drone_env(args.time_step),
        actor_factory=lambda i: GainActor(),
        compressor=Float16Compressor(),
    )
    t = result.trainer
    print(f"updates: {t['updates']}, weights version: {t['version']}, episodes: {t['episodes']}, "
          f"best gain: {agent.best:.2f} (mean return {agent.best_return:.2f})")
    for name, stats in sorted(result.workers.items()):
        print(f"{name}: {stats.episodes} episodes, running weights v{stats.weights_version}")


if __name__ == "__main__":
    main()
