"""What a config asks of the machine and of the game, checked before anything runs.

``rulka config validate`` and each role's start call :func:`check_resources` (through
``rulka.config.built.check_startable``): a replay memory that cannot fit in this machine's RAM,
a track the simulator does not have, a segment length no worker can hold. Each failure is one
``ConfigError`` line naming the key and the numbers, instead of an allocation error hours into
a run (numpy allocates lazily: a replay memory too large for the RAM fails only when it fills).

The replay estimate mirrors what the built-in memories allocate (``rulka.agents.iqn.replay``,
``rulka.memory.uniform``; ``tests/test_config_resources.py`` compares it with a filled memory):
per transition a few integers, per stored frame the float inputs, the shaping potential and the
grayscale image, frames stored once with the memories' 25 % margin. Each built-in memory plugin's
own size keys count (``trainer.memory_kwargs.capacity`` of ``simple`` and ``sac``, a
``memory_size_schedule`` given there to ``iqn``; ``ppo.rollout_steps_per_update``;
``dpo.dpo_pair_buffer_max`` as a lower bound). A memory plugin of another kind is not estimated.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rulka.errors import ConfigError

if TYPE_CHECKING:
    from rulka.config.model import RulkaConfig

# a segment is one message (network.max_message_bytes, 64 MiB by default) and a worker keeps
# up to worker.unacked_memory_limit_mb of them: far beyond any real episode slice
MAX_SEGMENT_STEPS = 100_000
_MAX_PENDING_EPISODES = 256  # both memories' default max_pending_episodes
_STEP_BYTES = 8 + 4 + 2  # action (int64), reward (float32), terminated and truncated flags


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """What a replay memory holds at its largest: ``transitions`` and ``nbytes`` in RAM;
    ``key`` is the config key that sets its size (lower it when it does not fit)."""

    memory: str
    transitions: int
    frames: int
    frame_bytes: int
    nbytes: int
    key: str = "memory.memory_size_schedule"


def frame_bytes(cfg: RulkaConfig) -> int:
    """Bytes of one stored observation: the float inputs (float32), the shaping potential
    (float32) and the grayscale image (uint8, W x H) unless ``nn.vis.no_image``. For a gym env
    the float inputs are unknown before the env exists: ``trainer.agent_kwargs.obs_dim`` where
    given, else counted as one."""
    if cfg.environment.backend == "gym":
        obs_dim = (cfg.trainer.agent_kwargs or {}).get("obs_dim", 1)
        floats = int(obs_dim) if isinstance(obs_dim, int) and obs_dim > 0 else 1
    else:
        floats = cfg.float_input_dim
    image = 0 if cfg.nn.vis.no_image or cfg.environment.backend == "gym" else cfg.w_downsized * cfg.h_downsized
    return 4 * floats + 4 + image


def _size(kwargs: dict, name: str, default: object, where: str) -> tuple[int, str]:
    """A size from ``trainer.memory_kwargs[name]`` (and the key that set it), else ``default``
    from ``where``. A value that is not a number is left to the memory to refuse."""
    if name in kwargs:
        value, key = kwargs[name], f"trainer.memory_kwargs.{name}"
    else:
        value, key = default, where
    try:
        return max(1, int(float(value))), key  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 1, key


def replay_plan(cfg: RulkaConfig) -> ReplayPlan | None:
    """The largest replay memory the config asks for, with the size keys of each built-in memory
    plugin (``trainer.memory_kwargs`` override the sections' keys, as the plugins read them).
    None: a memory this module does not know (a plugin of another kind, GRPO's groups)."""
    name = str(cfg.trainer.memory or cfg.training.algorithm)
    kwargs = dict(cfg.trainer.memory_kwargs or {})
    per_frame = frame_bytes(cfg)
    if name == "iqn":
        n = int(kwargs.get("n_steps", cfg.training.n_steps))
        if "memory_size_schedule" in kwargs:
            schedule, key = kwargs["memory_size_schedule"], "trainer.memory_kwargs.memory_size_schedule"
        else:
            schedule, key = cfg.memory.memory_size_schedule, "memory.memory_size_schedule"
        size = max(int(v[0]) for _, v in schedule)
        test = int(size * float(kwargs.get("buffer_test_ratio", cfg.memory.buffer_test_ratio))) + 1
        # _TransitionRing: state, next_state, action, terminal_actions (int64), n_steps (int16),
        # gamma (float32), n rewards (float32); a SumTree of float64 when prioritized
        per_transition = 4 * 8 + 2 + 4 + 4 * n
        tree = 0
        if float(kwargs.get("prio_alpha", cfg.memory.prio_alpha)) > 0:
            tree = 2 * 8 * (1 << max(0, size - 1).bit_length())
        frames = int(1.25 * (size + test)) + _MAX_PENDING_EPISODES * (n + 2) + 64
        return ReplayPlan(name, size + test, frames, per_frame,
                          (size + test) * per_transition + tree + frames * per_frame, key)
    if name == "sac":
        size, key = _size(kwargs, "capacity", cfg.sac.buffer_size, "sac.buffer_size")
        n = int(kwargs.get("n_steps", cfg.sac.n_steps))
        actions = 3 * 4 if cfg.environment.continuous_actions or cfg.environment.backend != "gym" else 8
        per_transition = 2 * 8 + actions + 4 + 4  # state, next_state, action, reward, discount
        frames = int(1.25 * size) + _MAX_PENDING_EPISODES * (n + 2) + 64
        return ReplayPlan(name, size, frames, per_frame, size * per_transition + frames * per_frame, key)
    if name == "simple":
        # rulka.agents.simple.SimpleReplayMemory: obs and next_obs (float32) per transition,
        # the action (int64), reward and done (float32)
        size, key = _size(kwargs, "capacity", 50000, "trainer.memory_kwargs.capacity")
        obs = per_frame - 4  # no potential
        return ReplayPlan(name, size, 2 * size, obs, size * (2 * obs + 8 + 4 + 4), key)
    if name == "ppo" and cfg.training.algorithm == "ppo":
        # the rollout of one update, whole segments (at least): each step's observation, action,
        # reward, flags, log-probability and value
        size = int(cfg.ppo.rollout_steps_per_update)
        return ReplayPlan(name, size, size, per_frame, size * (per_frame + _STEP_BYTES + 8),
                          "ppo.rollout_steps_per_update")
    if name == "dpo" and cfg.training.algorithm == "dpo":
        # a FIFO of whole episodes, each of one segment at least (a lower bound: episodes are longer)
        size = int(cfg.dpo.dpo_pair_buffer_max)
        steps = int(cfg.worker.segment_max_steps)
        return ReplayPlan(name, size * steps, size * (steps + 1), per_frame,
                          size * ((steps + 1) * per_frame + steps * _STEP_BYTES), "dpo.dpo_pair_buffer_max")
    return None


def physical_memory_bytes() -> int | None:
    """This machine's RAM (None where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    if os.name == "nt":
        try:
            import ctypes

            class _Status(ctypes.Structure):
                _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total", ctypes.c_ulonglong),
                            ("avail", ctypes.c_ulonglong), ("page_total", ctypes.c_ulonglong),
                            ("page_avail", ctypes.c_ulonglong), ("virt_total", ctypes.c_ulonglong),
                            ("virt_avail", ctypes.c_ulonglong), ("ext", ctypes.c_ulonglong)]

            status = _Status()
            status.length = ctypes.sizeof(_Status)
            if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
                return int(status.total)
        except (AttributeError, OSError):
            return None
    return None


def available_memory_bytes() -> int | None:
    """RAM this machine can give a new process now (Linux ``MemAvailable``; elsewhere the RAM)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return physical_memory_bytes()


def _gib(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"


def check_replay_fits(cfg: RulkaConfig, ram_bytes: int | None, what: str = "this machine has") -> None:
    """ConfigError unless the replay memory fits in ``ram_bytes`` (None: not checked)."""
    plan = replay_plan(cfg)
    if plan is None or ram_bytes is None or plan.nbytes <= ram_bytes:
        return
    key = plan.key
    raise ConfigError(
        f"the replay memory would need {_gib(plan.nbytes)} ({plan.transitions:,} transitions, {plan.frames:,} "
        f"frames of {plan.frame_bytes:,} bytes) and {what} {_gib(ram_bytes)} of RAM: lower `{key}`"
        + ("" if cfg.nn.vis.no_image or cfg.environment.backend == "gym"
           else " or the image size (`nn.w_downsized`, `nn.h_downsized`)"))


def track_name_problem(name: str) -> str:
    """Why the simulator cannot load track ``name`` ("" if it can name it: a bundled track,
    ``gen:<seed>`` or a ``.json`` file, which is read on the worker's machine)."""
    from rulka.envs.sim.tracks import bundled_track_names

    if name.endswith(".json"):
        return ""
    if name.startswith("gen:"):
        return "" if name[4:].lstrip("-").isdigit() else "a generated track is named 'gen:<integer seed>'"
    known = bundled_track_names()
    if name in known:
        return ""
    return f"the simulator has no such track (bundled: {', '.join(known)}; or 'gen:<seed>' or a .json file)"


def check_resources(cfg: RulkaConfig, replay: bool = True) -> None:
    """The checks every start makes: the simulator's track names, the segment length and (with
    ``replay``) the replay memory against this machine's RAM. Raises one ``ConfigError``."""
    if cfg.environment.backend == "sim":
        names = [("environment.track", str(cfg.environment.track))]
        names += [(f"map_cycle.entries[{i}].map_path", e.map_path) for i, e in enumerate(cfg.map_cycle.entries)]
        for key, name in names:
            problem = track_name_problem(name)
            if problem:
                raise ConfigError(f"config key `{key}` is {name!r}: {problem}")
    steps = int(cfg.worker.segment_max_steps)
    if steps > MAX_SEGMENT_STEPS:
        raise ConfigError(f"config key `worker.segment_max_steps` is {steps:,}: a segment is one message that a "
                          f"worker holds until it is acknowledged; keep it at or below {MAX_SEGMENT_STEPS:,} "
                          "(a few hundred steps is usual)")
    from rulka.compress import DEFAULT_MAX_OUTPUT_BYTES

    limit = int((cfg.worker.compressor_kwargs or {}).get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES))
    raw = (steps + 1) * frame_bytes(cfg) + steps * _STEP_BYTES
    if raw > limit:
        raise ConfigError(f"config key `worker.segment_max_steps` is {steps:,}: a segment of that many steps holds "
                          f"{_gib(raw)} of observations, over the {_gib(limit)} a trainer decompresses; the trainer "
                          f"would refuse every full segment (at most {limit // (frame_bytes(cfg) + _STEP_BYTES):,} "
                          "steps fit)")
    if replay:
        check_replay_fits(cfg, physical_memory_bytes())
