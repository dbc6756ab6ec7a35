"""Benchmark: IQN learner throughput (training batches/s and samples/s) at batch 512.

Two networks: the default run's (configs/sim_iqn.yaml: 48x36 image, dense 256) and a
Linesight-size one (160x120 image, float hidden 256, dense 1024). Batches come from a
``MiniRaceReplayMemory`` filled with synthetic segments, so sampling + collate is included
(also reported alone). Then the same learner through the trainer (``trainer_path``:
``Trainer.run`` ingesting zstd segments from an in-process link under the rate limiter, sampling,
publishing signed weights), its batches/s over the bare learner's just before. Prints one JSON
object per device (CPU always, CUDA when available: AMP on, so the trainer path exercises it).

    python -m bench.learner [--seconds 20] [--batch-size 512] [--threads N] [--no-trainer-path]
    python -m bench.learner --devices cuda --compile --prefetch   # a GPU machine's rows (bench/cuda_check.sh)
    python -m bench.learner --topologies [--networks vit_none_48x36,...]   # the fusion catalogue
    python -m bench.learner --steps [--steps-only] [--rounds 8] [--threads 1]   # the learner-step rows

``--steps`` (issue 67): each optimisation of the learner step against its baseline, both built in
one run and timed in interleaved windows (``--rounds`` of them, ``--seconds`` in all per
configuration), the ratio per window pair and its median: ``STEP_PAIRS`` (the optimizer's foreach,
Munchausen's fused target forwards; on CUDA Adam's fused kernel) and on CUDA the ``GPU_LADDER`` from
today's defaults through bfloat16 autocast, pinned and device batches (``memory.batch_device``) to
the loss compiled with CUDA graphs. Without a GPU the CUDA rows are listed as not measured.

On CUDA, ``--compile`` adds rows with torch.compile on (what ``nn.training.use_jit`` gives the
trainer there: the update's loss compiled once) beside the AMP-only ones, and ``--prefetch`` rows where a second thread samples and
collates the next batch while the device trains on this one (what ``trainer.prefetch_batches``
gives the trainer); with it the trainer path is measured twice, prefetch on (auto's choice on
CUDA) and off. ``--devices`` picks the devices (default: CPU, and CUDA when torch sees one).

``--topologies`` measures the guide's network catalogue instead (``TOPOLOGIES``: the ViT stem,
each fusion mode, the token layouts; 48x36 frames, dense 256, the bare learner only).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import numpy as np
import torch

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.replay import MiniRaceReplayMemory
from rulka.segment import Segment

FLOAT_DIM = 184  # the guide's float_input_dim with default environment settings
N_ACTIONS = 12

NETWORKS = {
    "default_48x36_dense256": dict(image_height=36, image_width=48, float_hidden_dim=128, dense_hidden_dimension=256),
    "linesight_160x120_dense1024": dict(image_height=120, image_width=160, float_hidden_dim=256,
                                        dense_hidden_dimension=1024),
}


_VIT = {"d_model": 64, "n_layers": 2, "n_heads": 4, "ff_mult": 2, "patch_size": 6}
_FUSION = {"d_model": 64, "n_layers": 2, "n_heads": 4, "ff_mult": 2}
_SIZE = {"image_size": {"width": 48, "height": 36}}
# name -> the ``nn`` section of a config (rulka.nn.fusion reads it into the network's topology)
TOPOLOGIES: dict[str, dict[str, Any]] = {
    "cnn_none_48x36": {"vis": {**_SIZE, "cnn": {}}},
    "vit_none_48x36": {"vis": {**_SIZE, "transformer": _VIT}},
    "vision_transformer_linear_48x36": {"fusion_mode": "vision_transformer", "vis": {**_SIZE, "transformer": _VIT},
                                        "encoder": {"transformer": _FUSION}},
    "post_concat_cnn_native_48x36": {"fusion_mode": "post_concat", "vis": {**_SIZE, "cnn": {}},
                                     "encoder": {"transformer": _FUSION}},
    "post_concat_cnn_mlp_48x36": {"fusion_mode": "post_concat", "vis": {**_SIZE, "cnn": {}},
                                  "encoder": {"fusion_encoder": "mlp", "transformer": {"d_model": 64},
                                              "fusion_mlp": {"hidden_dim": 256}}},
    "post_concat_cnn_conv1d_48x36": {"fusion_mode": "post_concat", "vis": {**_SIZE, "cnn": {}},
                                     "encoder": {"fusion_encoder": "cnn", "transformer": {"d_model": 64},
                                                 "fusion_cnn": {"hidden_channels": [128, 128]}}},
    "post_concat_vit_patch_tokens_48x36": {
        "fusion_mode": "post_concat", "vis": {**_SIZE, "transformer": {**_VIT, "fusion_tokens": "patch_tokens"}},
        "encoder": {"transformer": _FUSION, "post_concat_layout": "token_sequence", "float_token_input": "mlp_hidden"}},
    "unified_vit_48x36": {"fusion_mode": "unified", "vis": {**_SIZE, "transformer": _VIT},
                          "encoder": {"transformer": _FUSION}},
}


def topology_network(nn_section: dict[str, Any]) -> dict[str, Any]:
    """``build_agent`` keywords for a ``TOPOLOGIES`` entry (dense 256, float hidden 128)."""
    from rulka.config import config_from_dict
    from rulka.nn.fusion import float_hidden_dim, topology_from_config

    cfg = config_from_dict({"nn": {**nn_section, "float": {"mlp": {"hidden_dim": 128}}}})
    return dict(image_height=36, image_width=48, float_hidden_dim=float_hidden_dim(cfg), dense_hidden_dimension=256,
                topology=topology_from_config(cfg))


def filled_memory(h: int, w: int, batch_size: int, transitions: int = 6000, seed: int = 0,
                  **memory_kw: Any) -> MiniRaceReplayMemory:
    mem = MiniRaceReplayMemory(batch_size=batch_size, memory_size_schedule=[[0, (transitions * 2, 1)]],
                               mini_race_duration_actions=140, seed=seed, **memory_kw)
    for seg in _segments(h, w, transitions // 200, seed, worker="w"):
        mem.append(seg)
    return mem


def build_agent(net_kw: dict[str, Any], device: str, compile_net: bool = False, **hyper: Any) -> IQNAgent:
    """The benchmark's IQN agent for a ``NETWORKS`` entry (AMP on CUDA; torch.compile with
    ``compile_net``, which the agent honours on CUDA only; ``hyper``: other ``IQNHyper`` fields)."""
    spec = IQNNetworkSpec(float_dim=FLOAT_DIM, n_actions=N_ACTIONS, embedding_dimension=64, **net_kw)
    return IQNAgent(spec, IQNHyper(**{"use_amp": device == "cuda", "use_jit": compile_net, **hyper}),
                    device=device, seed=0)


def _segments(h: int, w: int, count: int, seed: int, t: int = 200, worker: str = "w0") -> list[Segment]:
    """``count`` whole episodes of ``t`` steps of random frames, floats and actions."""
    rng = np.random.default_rng(seed)
    return [Segment("bench", worker, ep, ep, 0, 0, 0,
                    {"obs/img": rng.integers(0, 255, (t + 1, h, w), dtype=np.uint8),
                     "obs/float": rng.normal(size=(t + 1, FLOAT_DIM)).astype(np.float32),
                     "action": rng.integers(0, N_ACTIONS, t), "reward": rng.normal(size=t).astype(np.float32),
                     "terminated": np.zeros(t, bool), "truncated": np.zeros(t, bool),
                     "extra/greedy": rng.random(t) > 0.1}, episode_done=True) for ep in range(count)]


def measure_trainer_path(name: str, net_kw: dict[str, Any], device: str, batch_size: int, seconds: float,
                         bare_batches_per_s: float, prefetch: str = "auto") -> dict[str, Any]:
    """The same learner through ``Trainer.run``: segments arrive as zstd payloads on an in-process
    link (a worker's messages, queued before the timed window), are decoded, deduplicated and
    stored under the rate limiter (the memory's 32 samples per insert), batches are sampled by
    the trainer, weights are encoded and signed every 100 updates. No journal or checkpoint (no
    run folder: ``bench/checkpoint.py`` measures those)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rulka.compress import ZstdCompressor
    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    cuda = device == "cuda"
    agent = build_agent(net_kw, device)
    spec = agent.spec
    agent.batch_size = batch_size
    # memory.batch_device auto, as a trainer's memory: device batches on CUDA (the ring fits), host on CPU
    mem = MiniRaceReplayMemory(batch_size=batch_size, memory_size_schedule=[[0, (12000, 1)]],
                               mini_race_duration_actions=140, seed=0, device=device)
    warm_s = max(2.0, seconds / 5)
    # enough data for the warm-up and the window at the bare learner's pace (x1.5), and a batch
    transitions = int(1.5 * bare_batches_per_s * (warm_s + seconds) * batch_size / mem.samples_per_insert)
    segments = _segments(spec.image_height, spec.image_width, max(transitions // 200, batch_size // 200) + 4, seed=1)
    hub = LocalHub(queue_size=len(segments) + 16)
    trainer = Trainer({"training": {"batch_size": batch_size}, "worker": {"segment_max_steps": 200},
                       "trainer": {"rate_limit": {"max_deferred_segments": len(segments)},
                                   "prefetch_batches": prefetch}},
                      hub.trainer_link(), agent=agent, memory=mem, signing_key=Ed25519PrivateKey.generate())
    worker = hub.worker_link("w0")
    codec = ZstdCompressor()
    for seg in segments:
        worker.send("segment", codec.compress(seg))
    trainer.run(max_seconds=warm_s)
    if cuda:
        torch.cuda.synchronize()
    u0, t0 = trainer.state.updates, time.perf_counter()
    trainer.run(max_seconds=seconds)
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    n = trainer.state.updates - u0
    return {"network": name, "device": device, "batch_size": batch_size, "batches": n,
            "batches_per_s": round(n / elapsed, 3), "samples_per_s": round(n * batch_size / elapsed, 1),
            "over_bare": round(n / elapsed / bare_batches_per_s, 3) if bare_batches_per_s else None,
            "segments_stored": trainer.state.segments - len(trainer.intake.deferred),
            "weights_published": trainer.state.version, "limiter_dropped": trainer.state.counters["limiter_dropped"],
            "prefetch": trainer.learner.prefetch, "batch_mode": mem.batch_mode}


def train_for(agent: Any, memory: Any, batch_size: int, seconds: float, min_updates: int = 0,
              cuda: bool = False) -> tuple[int, float]:
    """The bare learner, ``agent.train(memory.sample(batch_size))`` in a loop for ``seconds`` (and at
    least ``min_updates`` updates): (updates, elapsed seconds). With ``cuda`` the clock starts and
    stops on a synchronized device. ``bench/allocator.py`` and ``bench/trainer_loop.py`` (so
    ``bench/colocation.py``) time the learner with this loop too."""
    if cuda:
        torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds or n < min_updates:
        agent.train(memory.sample(batch_size))
        n += 1
    if cuda:
        torch.cuda.synchronize()
    return n, time.perf_counter() - t0


class _SampledAhead:
    """A memory whose ``sample`` hands out the batch a second thread drew during the previous
    update and starts drawing the next (the memory is not written meanwhile here, so the two
    threads never touch it at once); ``train_for`` over it is the prefetching learner."""

    def __init__(self, memory: Any, batch_size: int, pool: Any) -> None:
        self.memory, self.batch_size, self.pool = memory, batch_size, pool
        self.pending = pool.submit(memory.sample, batch_size)

    def sample(self, batch_size: int) -> Any:
        batch = self.pending.result()
        self.pending = self.pool.submit(self.memory.sample, batch_size)
        return batch


def train_for_prefetched(agent: Any, memory: Any, batch_size: int, seconds: float, min_updates: int = 0,
                         cuda: bool = False) -> tuple[int, float]:
    """``train_for`` with the next batch sampled on a second thread while this one trains."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        ahead = _SampledAhead(memory, batch_size, pool)
        ahead.pending.result()  # the first batch is drawn before the clock starts
        result = train_for(agent, ahead, batch_size, seconds, min_updates=min_updates, cuda=cuda)
        ahead.pending.result()
    return result


def measure(name: str, net_kw: dict[str, Any], device: str, batch_size: int, seconds: float,
            compile_net: bool = False, prefetch: bool = False) -> dict[str, Any]:
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_build = time.perf_counter()
    agent = build_agent(net_kw, device, compile_net)
    spec = agent.spec
    mem = filled_memory(spec.image_height, spec.image_width, batch_size)
    # sampling alone
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < min(3.0, seconds / 4):
        mem.sample(batch_size)
        n += 1
    sample_s = (time.perf_counter() - t0) / n
    for _ in range(3):  # warm-up (allocations, cudnn autotune, torch.compile's first graphs)
        agent.train(mem.sample(batch_size))
    if cuda:
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t_build
    loop = train_for_prefetched if prefetch else train_for
    n, elapsed = loop(agent, mem, batch_size, seconds, min_updates=3, cuda=cuda)
    row = {"network": name, "device": device, "batch_size": batch_size, "batches": n,
           "batches_per_s": round(n / elapsed, 3), "samples_per_s": round(n * batch_size / elapsed, 1),
           "sample_collate_ms": round(1000 * sample_s, 2),
           "parameters": sum(p.numel() for p in agent.online.parameters())}
    if cuda:
        row.update(amp=agent.amp, compiled=bool(compile_net), prefetch=prefetch,
                   build_and_warmup_s=round(warmup_s, 1), step_ms=round(1000 * elapsed / n, 2),
                   peak_gpu_mb=round(torch.cuda.max_memory_allocated() / 2**20))
    return row


# ----------------------------------------------------------------------------- learner step rows
# Each optimisation of the learner step (issue 67) as a pair of configurations measured in one run,
# the timed windows interleaved (before, after, before, after, ...) so that a machine's drift falls
# on both. A configuration: IQNHyper fields, memory.batch_device, the prefetching sampler thread.
STEP_PAIRS: dict[str, dict[str, Any]] = {
    # torch's per-tensor loop (its own choice on CPU) vs foreach (the agent's auto there and on CUDA)
    "optimizer_foreach": {"devices": ("cpu", "cuda"), "before": {"hyper": {"optimizer_impl": "for_loop"}},
                          "after": {}},
    # Munchausen: the target network on next states and on states, two forwards vs one of both
    "munchausen_fused_forwards": {"devices": ("cpu", "cuda"),
                                  "before": {"hyper": {"use_munchausen": True, "fuse_forwards": False}},
                                  "after": {"hyper": {"use_munchausen": True, "fuse_forwards": True}}},
    # Adam (trainer.agent_kwargs optimizer: adam): foreach vs torch's fused kernel (the agent's auto on CUDA)
    "adam_fused": {"devices": ("cuda",), "before": {"hyper": {"optimizer": "adam", "optimizer_impl": "foreach"}},
                   "after": {"hyper": {"optimizer": "adam"}}},
    # PER: the TD errors read back at once (a host sync per update on CUDA) vs deferred to the
    # replay's next sample (rulka.memory.deferred; the agent's default); on CUDA with the prefetching
    # sampler, as the trainer runs there (the wait then falls on the sampler's thread)
    # (PER on: prio_alpha 0.6; the shipped configs sample uniformly, prio_alpha 0, and report nothing)
    "td_errors_deferred": {"devices": ("cpu",), "after": {"memory": {"prio_alpha": 0.6}},
                           "before": {"memory": {"prio_alpha": 0.6}, "agent": {"defer_td_errors": False}}},
    "td_errors_deferred_prefetch": {"devices": ("cuda",), "after": {"prefetch": True, "memory": {"prio_alpha": 0.6}},
                                    "before": {"prefetch": True, "memory": {"prio_alpha": 0.6},
                                               "agent": {"defer_td_errors": False}}},
}
# On CUDA a ladder from today's defaults (AMP float16, host batches, prefetch on) to every setting
# on, each rung paired with the one before it (and device batches also with host)
GPU_LADDER: list[tuple[str, dict[str, Any]]] = [
    ("today", {"prefetch": True}),
    ("amp_bfloat16", {"prefetch": True, "hyper": {"amp_dtype": "bfloat16"}}),
    ("batch_pinned", {"prefetch": True, "batch_device": "pinned", "hyper": {"amp_dtype": "bfloat16"}}),
    ("batch_device", {"prefetch": True, "batch_device": "device", "hyper": {"amp_dtype": "bfloat16"}}),
    ("compile_reduce_overhead", {"prefetch": True, "batch_device": "device",
                                 "hyper": {"amp_dtype": "bfloat16", "use_jit": True, "compile_mode": "reduce-overhead"}}),
]
LADDER_PAIRS = [("amp_bfloat16", "today"), ("batch_pinned", "amp_bfloat16"), ("batch_device", "amp_bfloat16"),
                ("compile_reduce_overhead", "batch_device"), ("compile_reduce_overhead", "today")]
NOT_ON_GPU = "not measured on a GPU"


def _configured(net_kw: dict[str, Any], device: str, batch_size: int, cfg: dict[str, Any]) -> tuple[Any, Any]:
    """(agent, memory) for one configuration, warmed up (3 updates: allocations, autotune, compile)."""
    agent = build_agent(net_kw, device, **cfg.get("hyper", {}))
    for key, value in cfg.get("agent", {}).items():  # agent attributes that are no IQNHyper field
        setattr(agent, key, value)
    spec = agent.spec
    mem = filled_memory(spec.image_height, spec.image_width, batch_size,
                        batch_device=cfg.get("batch_device", "host"), device=device, **cfg.get("memory", {}))
    for _ in range(3):
        agent.train(mem.sample(batch_size))
    return agent, mem


def measure_interleaved(net_kw: dict[str, Any], device: str, batch_size: int, configs: dict[str, dict[str, Any]],
                        seconds: float, rounds: int = 2) -> dict[str, dict[str, Any]]:
    """Each configuration's batches/s over ``rounds`` windows of ``seconds / rounds``, the windows
    of all configurations taken in turn; a configuration that fails to build or train gets its error."""
    cuda = device == "cuda"
    built: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, cfg in configs.items():
        t0 = time.perf_counter()
        try:
            built[name] = _configured(net_kw, device, batch_size, cfg)
            if cuda:
                torch.cuda.synchronize()
            out[name] = {"build_and_warmup_s": round(time.perf_counter() - t0, 1), "rounds": []}
        except Exception as exc:  # a GPU-only path that fails is a row with its error, not a lost check
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    for _ in range(rounds):
        for name, (agent, mem) in list(built.items()):
            cfg = configs[name]
            loop = train_for_prefetched if cfg.get("prefetch") else train_for
            try:
                n, elapsed = loop(agent, mem, batch_size, seconds / rounds, min_updates=2, cuda=cuda)
            except Exception as exc:
                out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                del built[name]
                continue
            out[name]["rounds"].append(round(n / elapsed, 3))
    for row in out.values():
        if "rounds" in row:
            row["batches_per_s"] = round(float(np.mean(row["rounds"])), 3)
            row["samples_per_s"] = round(row["batches_per_s"] * batch_size, 1)
    return out


def _pair_row(name: str, network: str, device: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"step": name, "network": network, "device": device,
                           "before": before, "after": after}
    if "rounds" in before and "rounds" in after:
        ratios = [a / b for a, b in zip(after["rounds"], before["rounds"]) if b]
        row["ratio_rounds"] = [round(r, 3) for r in ratios]
        row["ratio"] = round(float(np.median(ratios)), 3) if ratios else None
    return row


def measure_steps(network: str, net_kw: dict[str, Any], device: str, batch_size: int,
                  seconds: float, ladder: bool = True, rounds: int = 2) -> list[dict[str, Any]]:
    """The learner-step rows for one network on one device (``STEP_PAIRS``; on CUDA the ladder).
    Each row is also written to stderr as it is measured (a run cut short keeps what it measured)."""
    rows = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps({"bench": "learner_step_row", **row}), file=sys.stderr, flush=True)

    for name, pair in STEP_PAIRS.items():
        if device not in pair["devices"]:
            continue
        got = measure_interleaved(net_kw, device, batch_size, {"before": pair["before"], "after": pair["after"]},
                                  seconds, rounds)
        emit(_pair_row(name, network, device, got["before"], got["after"]))
    if device == "cuda" and ladder:
        got = measure_interleaved(net_kw, device, batch_size, dict(GPU_LADDER), seconds, rounds)
        for after, before in LADDER_PAIRS:
            emit(_pair_row(f"{after}_vs_{before}", network, device, got[before], got[after]))
    return rows


def pending_gpu_rows() -> list[dict[str, Any]]:
    """The CUDA rows this machine cannot measure, named so that a reader sees what is missing."""
    names = [n for n, p in STEP_PAIRS.items() if "cuda" in p["devices"]] + [f"{a}_vs_{b}" for a, b in LADDER_PAIRS]
    return [{"step": n, "device": "cuda", "result": NOT_ON_GPU} for n in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="timed training per network and device")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--networks", default=",".join(NETWORKS),
                        help="comma-separated subset of " + ", ".join(NETWORKS) + " (with --topologies: of "
                             + ", ".join(TOPOLOGIES) + ")")
    parser.add_argument("--no-trainer-path", action="store_true",
                        help="skip the same learner through Trainer.run (ingest, rate limiter, publishing)")
    parser.add_argument("--devices", default="",
                        help="comma-separated devices (default: cpu, and cuda when torch sees one)")
    parser.add_argument("--compile", action="store_true",
                        help="on CUDA, also rows with torch.compile on (nn.training.use_jit)")
    parser.add_argument("--prefetch", action="store_true",
                        help="on CUDA, also rows with the next batch sampled on a second thread")
    step_flags = {  # issue 67's learner-step rows
        "--steps": {"action": "store_true", "help": "the learner-step rows: each optimisation paired with its "
                    "baseline in one run (STEP_PAIRS; on CUDA also the ladder GPU_LADDER)"},
        "--rounds": {"type": int, "default": 2,
                     "help": "with --steps: interleaved timed windows per configuration (--seconds in all)"},
        "--steps-only": {"action": "store_true", "help": "with --steps: only the step rows (no plain rows, "
                         "no trainer path)"},
        "--steps-networks": {"default": "", "help": "with --steps: networks for the step rows (default: "
                             "--networks; the CUDA ladder on the last one only)"},
    }
    for flag, kw in step_flags.items():
        parser.add_argument(flag, **kw)
    parser.add_argument("--topologies", action="store_true",
                        help="measure the fusion catalogue (TOPOLOGIES) with the bare learner instead")
    args = parser.parse_args()
    networks = NETWORKS
    if args.topologies:
        networks = {name: topology_network(nn) for name, nn in TOPOLOGIES.items()}
        if args.networks == ",".join(NETWORKS):
            args.networks = ",".join(TOPOLOGIES)
        args.no_trainer_path = True
    from rulka.trainer.allocator import keep_freed_memory

    malloc_tuned = keep_freed_memory()  # as rulka-trainer does (bench/allocator.py: with and without)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if args.devices:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
        if "cuda" in devices and not torch.cuda.is_available():
            parser.error("--devices names cuda but torch sees no CUDA device")
    for device in devices:
        results, trainer_path = [], []
        for n in [] if args.steps_only else args.networks.split(","):
            results.append(measure(n, networks[n], device, args.batch_size, args.seconds))
            if device == "cuda" and args.prefetch:
                results.append(measure(n, networks[n], device, args.batch_size, args.seconds, prefetch=True))
            if device == "cuda" and args.compile:
                results.append(measure(n, networks[n], device, args.batch_size, args.seconds, compile_net=True))
                if args.prefetch:
                    results.append(measure(n, networks[n], device, args.batch_size, args.seconds,
                                           compile_net=True, prefetch=True))
            if not args.no_trainer_path:
                bare = next(r for r in results if r["network"] == n and not r.get("compiled")
                            and not r.get("prefetch"))
                trainer_path.append(measure_trainer_path(n, networks[n], device, args.batch_size, args.seconds,
                                                         bare["batches_per_s"]))
                if device == "cuda" and args.prefetch:  # auto is on there: the same without it
                    trainer_path.append(measure_trainer_path(n, networks[n], device, args.batch_size, args.seconds,
                                                             bare["batches_per_s"], prefetch="off"))
        steps: list[dict[str, Any]] = []
        if args.steps:
            names = (args.steps_networks or args.networks).split(",")
            for n in names:
                steps += measure_steps(n, networks[n], device, args.batch_size, args.seconds, ladder=n == names[-1],
                                       rounds=args.rounds)
            if "cuda" not in devices:
                steps += pending_gpu_rows()
        print(json.dumps({"bench": "learner", "device": device, "torch": torch.__version__,
                          "cpu_threads": torch.get_num_threads(), "machine": platform.machine(),
                          "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
                          "malloc_keeps_freed_memory": malloc_tuned,
                          "results": results, "trainer_path": trainer_path,
                          **({"steps": steps} if args.steps else {})}), flush=True)


if __name__ == "__main__":
    main()
