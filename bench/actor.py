"""Benchmark: IQN actor decisions per second at batch 1 (what bounds a worker on a fast env).

Two parts, one JSON object:

``results``: for the float-only networks a worker runs (configs/cartpole_iqn.yaml's, the CPU
default sim run's 184-float one) and the sim's 48x36 image one, ``IQNActor.act_with_info``
exploring (sampled taus) and greedy (``test=True``) through the numpy path a float-only network
takes on CPU and through torch (``numpy_inference=False``), rounds alternating, medians kept.

``paths``: the image networks (the guide's 160x120 CNN with float MLP 256 and dense 1024, and the
sim's 48x36 one), greedy, 32 quantiles, one row per (device, path), each with decisions/s, ms
per decision, its speed-up over torch eager measured in the same alternating rounds (on CPU also
per second of the process's CPU time, ``decisions_per_cpu_s``: one thread, so per core-second,
and on a shared machine far steadier than wall-clock time; ``best_cpu``, the best of the paths a worker
runs, and the targets read it; ``best_cpu_any`` includes the others), and how
many of ``--frames`` frames recorded from the simulator (seeded) it acts on exactly as eager
does. CPU paths: ``eager`` (``IQNActor`` as built), ``batch1`` (``IQNActor.accelerate`` in
float32: the greedy taus' embedding once per weights version, features broadcast over the taus,
the CNN in channels_last), ``batch1_contiguous`` (batch1 without channels_last), ``compile``
(batch1's greedy step through torch.compile), ``int8`` (batch1 with int8 heads and the float32
re-check of near ties where the heads are large: what ``worker.cpu_int8`` runs), ``ort`` (the
whole step exported to ONNX and run by ONNX Runtime with one thread: ``worker.cpu_runtime:
onnxruntime`` with ``cpu_int8: false``) and ``ort_int8`` (ONNX Runtime's features under the int8
heads: ``cpu_runtime: onnxruntime`` with ``cpu_int8: true``, where the int8 heads apply); "not
installed" without ``rulka[onnx]``; ``setup_s``: until the graph is built. CUDA paths (measured where
torch sees a GPU, else "not measured"): ``eager`` fp32 and ``graph`` (fp16 autocast, channels_last,
CUDA graph: what ``worker.device: cuda`` runs), plus ``batched``: ms per forward of N
observations at once (N = 1, 2, 4, 8) and the memory one process's CUDA context takes, for the
several-instances design (docs/performance.md); on CPU ``batched_ort``, the CPU ms per
observation of one ONNX Runtime forward of N = 1, 2, 4 observations, for the same choice.

    python -m bench.actor [--quick] [--seconds 2] [--rounds 3] [--frames 200] [--no-compile]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rulka.agents.iqn import IQNActor, IQNNetworkSpec  # noqa: E402
from rulka.nn.inference import onnxruntime_missing  # noqa: E402

NETWORKS: dict[str, dict[str, Any]] = {
    "cartpole": dict(float_dim=4, n_actions=2, float_hidden_dim=128, dense_hidden_dimension=256),
    "sim_float184": dict(float_dim=184, n_actions=12, float_hidden_dim=128, dense_hidden_dimension=256),
    "sim_image48x36": dict(float_dim=184, n_actions=12, float_hidden_dim=128, dense_hidden_dimension=256,
                           image_height=36, image_width=48),
}
# the guide's network (configs/default.yaml: 160x120 frames, float MLP 256, dense 1024) and the sim's image one
IMAGE_NETWORKS: dict[str, dict[str, Any]] = {
    "guide160x120": dict(float_dim=184, n_actions=12, float_hidden_dim=256, dense_hidden_dimension=1024,
                         image_height=120, image_width=160),
    "sim_image48x36": NETWORKS["sim_image48x36"],
}
TARGETS = {"guide160x120_greedy_per_s_min": 200, "sim_image48x36_greedy_per_s_min": 3000,
           "cuda_guide160x120_step_ms_max": 1.0}
K = 32
SEED = 1  # the initialisation the paths are timed and compared on (tests/test_acting.py uses it too)


def actor_for(net: dict[str, Any], seed: int = 0, **kw: Any) -> IQNActor:
    torch.manual_seed(seed)
    spec = dataclasses.asdict(IQNNetworkSpec(embedding_dimension=64, **net))
    return IQNActor(spec, iqn_k=K, epsilon=0.05, seed=seed, **kw)


def normalised(net: dict[str, Any], frames: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """``net`` with the float inputs normalised by the frames' own mean and std (as a run's
    ``state_normalization`` does; raw, the simulator's metre-scale floats swamp a fresh network's
    output and it picks one action for every frame)."""
    floats = np.stack([f["float"] for f in frames])
    return {**net, "float_mean": floats.mean(0).tolist(), "float_std": (floats.std(0) + 1e-3).tolist()}


def recorded_frames(n: int, width: int, height: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` observations recorded from the simulator on its default track, seeded: the same
    frames every run (actions: 60% straight on, else uniform; a new episode at each end)."""
    from rulka.envs.sim.env import SimTrackEnv

    env = SimTrackEnv(image=True, image_size=(width, height))
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n):
        obs, _, terminated, truncated, _ = env.step(0 if rng.random() < 0.6 else int(rng.integers(env.action_space.n)))
        frames.append({"img": np.array(obs["img"]), "float": np.array(obs["float"])})
        if terminated or truncated:
            obs, _ = env.reset()
    return frames


def rate(step: Callable[[Any], Any], frames: list[Any], seconds: float, cpu: bool = False) -> float:
    """Decisions per second of wall-clock time, or with ``cpu`` per second of this process's CPU
    time (one thread: per core-second; on a shared machine far less disturbed by other loads)."""
    clock = time.process_time if cpu else time.perf_counter
    for i in range(10):
        step(frames[i % len(frames)])
    n, t0, w0 = 0, clock(), time.perf_counter()
    while time.perf_counter() - w0 < seconds:
        for _ in range(10):
            step(frames[n % len(frames)])
            n += 1
    return n / max(clock() - t0, 1e-9)


def measure(name: str, net: dict[str, Any], seconds: float, rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    flt = rng.standard_normal(net["float_dim"]).astype(np.float32)
    obs: Any = flt
    if net.get("image_height"):
        obs = {"img": rng.integers(0, 255, (1, net["image_height"], net["image_width"]), dtype=np.uint8), "float": flt}
    actors = {"numpy": actor_for(net), "torch": actor_for(net, numpy_inference=False)}
    actors["torch"].load_weights(actors["numpy"].get_weights())
    row: dict[str, Any] = {"network": name, "numpy_path": actors["numpy"].uses_numpy}
    for mode, test in (("exploring", False), ("greedy", True)):
        rounds_of: dict[str, list[float]] = {"numpy": [], "torch": []}
        for _ in range(rounds):
            for path, actor in actors.items():
                rounds_of[path].append(rate(lambda o, a=actor, t=test: a.act_with_info(o, t), [obs], seconds))
        med = {p: float(np.median(v)) for p, v in rounds_of.items()}
        row[mode] = {"numpy_acts_per_s": round(med["numpy"]), "torch_acts_per_s": round(med["torch"]),
                     "speedup": round(med["numpy"] / med["torch"], 2)}
    return row


# ----------------------------------------------------------------------------- the actor paths

def compare_and_time(steps: dict[str, Callable[[Any], Any]], frames: list[Any], seconds: float,
                     rounds: int, on_cpu: bool = True) -> dict[str, dict[str, Any]]:
    """Per path (``eager`` among them): how many of ``frames`` it acts on as eager does, then its
    decisions/s (median of ``rounds`` rounds, the paths alternating) and its ratio to eager's;
    ``on_cpu``: also per second of CPU time (``decisions_per_cpu_s``, what the targets read)."""
    reference = [int(steps["eager"](o)) for o in frames]
    agree = {p: sum(int(s(o)) == r for o, r in zip(frames, reference)) for p, s in steps.items()}
    rates: dict[str, list[float]] = {p: [] for p in steps}
    cpu_rates: dict[str, list[float]] = {p: [] for p in steps}
    for _ in range(rounds):
        for p, s in steps.items():
            rates[p].append(rate(s, frames, seconds))
            if on_cpu:
                cpu_rates[p].append(rate(s, frames, seconds, cpu=True))
    base = float(np.median(rates["eager"]))
    out = {}
    for p in steps:
        med = float(np.median(rates[p]))
        out[p] = {"decisions_per_s": round(med, 1), "ms": round(1000 / med, 3), "over_eager": round(med / base, 2),
                  "agrees_with_eager": f"{agree[p]}/{len(frames)}"}
        if cpu_rates[p]:
            cmed, cbase = float(np.median(cpu_rates[p])), float(np.median(cpu_rates["eager"]))
            out[p].update(decisions_per_cpu_s=round(cmed, 1), cpu_ms=round(1000 / cmed, 3),
                          cpu_over_eager=round(cmed / cbase, 2))
    return out


def _greedy_module(actor: IQNActor) -> torch.nn.Module:
    """batch1's greedy step as a module of (img, floats): for torch.compile and the ONNX export."""
    fast = actor._fast
    assert fast is not None

    class Greedy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = actor.net
            with torch.no_grad():  # a plain tensor (the ONNX tracer refuses inference-mode ones)
                self.register_buffer("emb", fast._embed(fast.midpoints))

        def forward(self, img: torch.Tensor, flt: torch.Tensor) -> torch.Tensor:
            return self.net.head(self.net.features(img, flt) * self.emb).mean(dim=0)

    return Greedy().eval()


def _module_step(module: Callable[..., torch.Tensor]) -> Callable[[Any], int]:
    def step(o: dict[str, np.ndarray]) -> int:
        with torch.inference_mode():
            q = module(torch.from_numpy(o["img"][None]), torch.from_numpy(o["float"][None]))
        return int(torch.argmax(q))
    return step


SHIPPED_CPU_PATHS = ("eager", "batch1", "int8", "ort", "ort_int8")
"""The CPU paths a worker runs (``IQNActor`` as built, ``accelerate`` in float32, with
``worker.cpu_int8``, and with ``worker.cpu_runtime: onnxruntime`` without and with cpu_int8): the
targets read the best of these; torch.compile is measured beside them (``best_cpu_any``) but no
worker runs it."""


def best_paths(paths: list[dict[str, Any]], n_frames: int, allowed: tuple[str, ...] | None) -> dict[str, Any]:
    """The fastest CPU path per network (by CPU time, one thread) among ``allowed`` (None: any) that
    acts as eager on every frame."""
    best: dict[str, dict[str, Any]] = {}
    for row in paths:
        if row["device"] == "cpu" and isinstance(row.get("decisions_per_cpu_s"), float) \
                and (allowed is None or row["path"] in allowed) \
                and row.get("agrees_with_eager", "").split("/")[0] == str(n_frames) \
                and row["decisions_per_cpu_s"] > best.get(row["network"], {}).get("decisions_per_cpu_s", 0):
            best[row["network"]] = row
    return {n: {"path": r["path"], "decisions_per_s": r["decisions_per_cpu_s"], "over_eager": r["cpu_over_eager"],
                "wall_decisions_per_s": r["decisions_per_s"]} for n, r in best.items()}


def cpu_paths(name: str, net: dict[str, Any], frames: list[Any], seconds: float, rounds: int,
              compile_too: bool) -> list[dict[str, Any]]:
    net = normalised(net, frames)
    eager = actor_for(net, SEED)
    weights = eager.get_weights()

    def accelerated(**kw: Any) -> IQNActor:
        a = actor_for(net)
        a.load_weights(weights)
        a.accelerate("cpu", **kw)
        return a

    batch1, int8, contiguous = accelerated(), accelerated(int8=True), accelerated()
    if contiguous.net.img_head is not None:  # batch1 as it was before channels_last
        contiguous.net.img_head.to(memory_format=torch.contiguous_format)
    steps: dict[str, Callable[[Any], Any] | str] = {
        "eager": lambda o: eager.act(o, True), "batch1_contiguous": lambda o: contiguous.act(o, True),
        "batch1": lambda o: batch1.act(o, True), "int8": lambda o: int8.act(o, True)}
    setup_s: dict[str, float] = {}
    # what worker.cpu_runtime: onnxruntime runs: ONNX Runtime's whole float32 step, and with cpu_int8
    # (where the int8 heads apply) its features under torch's int8 heads
    ort_actors: dict[str, IQNActor] = {}
    missing = onnxruntime_missing()
    # ort_int8: ONNX Runtime's features and int8 heads (what ships); ort_torch_int8: its features under
    # torch's int8 heads (what shipped before, kept to pair the two in one run)
    for path, kw in (("ort", {}), ("ort_int8", {"int8": True}), ("ort_torch_int8", {"int8": True})):
        if missing:
            steps[path] = missing
            continue
        t0 = time.perf_counter()
        a = accelerated(runtime="onnxruntime", **kw)
        if path == "ort_torch_int8" and a._fast is not None:
            a._fast.ort_heads_ok = False
        a.act(frames[0], True)  # the first observation fixes the graph's shapes
        fast = a._fast
        if fast is None or not fast.wait_built(300) or fast._ort_step is None:
            steps[path] = "not built (see the log)"
            continue
        if path in ("ort_int8", "ort_torch_int8") and not fast.int8:
            steps[path] = "as ort (int8 heads do not apply to this network)"
            continue
        setup_s[path] = time.perf_counter() - t0
        ort_actors[path] = a
        steps[path] = lambda o, a=a: a.act(o, True)
    if compile_too:
        t0 = time.perf_counter()
        compiled = torch.compile(_greedy_module(accelerated()))
        steps["compile"] = _module_step(compiled)
        steps["compile"](frames[0])
        setup_s["compile"] = time.perf_counter() - t0
    measured = compare_and_time({p: s for p, s in steps.items() if callable(s)}, frames, seconds, rounds)
    rows = []
    for p, s in steps.items():
        row: dict[str, Any] = {"network": name, "device": "cpu", "path": p}
        if not callable(s):
            row["decisions_per_s"] = s
        else:
            row.update(measured[p])
            if p in setup_s:
                row["setup_s"] = round(setup_s[p], 1)
            if p in ("int8", "ort_int8", "ort_torch_int8"):
                fast = (int8 if p == "int8" else ort_actors[p])._fast
                if fast is not None:
                    row["float32_rechecks"] = f"{fast.int8_rechecks}/{fast.calls}"
                    row["int8_alone_would_differ"] = fast.int8_overruled
        rows.append(row)
    return rows


def cpu_batched(name: str, net: dict[str, Any], frames: list[Any], seconds: float) -> dict[str, Any]:
    """CPU ms per observation of one forward of N = 1, 2, 4 observations (ONNX Runtime's whole
    float32 step, one thread): what one process batching N instances would save over N processes."""
    from rulka.agents.iqn.network import mean_q
    from rulka.nn.inference import OrtStep

    row: dict[str, Any] = {"network": name, "device": "cpu", "path": "batched_ort"}
    if onnxruntime_missing():
        return {**row, "cpu_ms_per_observation_of_n": onnxruntime_missing()}
    actor = actor_for(normalised(net, frames), SEED)

    class Batch(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = actor.net

        def forward(self, img: torch.Tensor, flt: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
            return mean_q(self.net, img, flt, K, taus)

    per_obs: dict[str, float] = {}
    for n in (1, 2, 4):
        img = np.stack([f["img"] for f in frames[:n]])
        flt = np.stack([f["float"] for f in frames[:n]])
        taus = ((np.arange(K, dtype=np.float32) + 0.5) / K).repeat(n)
        step = OrtStep(Batch(), [torch.from_numpy(img), torch.from_numpy(flt), torch.from_numpy(taus)])
        forwards_per_s = rate(lambda _o, s=step, a=(img, flt, taus): s(*a), [None], seconds, cpu=True)
        per_obs[str(n)] = round(1000 / (n * forwards_per_s), 3)
    return {**row, "cpu_ms_per_observation_of_n": per_obs}


def cuda_paths(name: str, net: dict[str, Any], frames: list[Any], seconds: float, rounds: int) -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return [{"network": name, "device": "cuda", "path": p, "decisions_per_s": "not measured"}
                for p in ("eager", "graph", "batched")]
    net = normalised(net, frames)
    eager = actor_for(net, SEED)
    eager.net.to("cuda")
    eager.device = torch.device("cuda")
    eager._midpoints = eager._midpoints.cuda()
    graph = actor_for(net)
    graph.load_weights({k: v for k, v in eager.get_weights().items()})
    graph.accelerate("cuda")
    steps = {"eager": lambda o: eager.act(o, True), "graph": lambda o: graph.act(o, True)}
    measured = compare_and_time(steps, frames, seconds, rounds, on_cpu=False)
    rows = [{"network": name, "device": "cuda", "path": p, **measured[p]} for p in steps]
    # one forward of N observations (fp16 autocast, as a batching inference process would run it)
    batched: dict[str, float] = {}
    img = torch.from_numpy(np.stack([f["img"] for f in frames[:8]])).cuda()
    flt = torch.from_numpy(np.stack([f["float"] for f in frames[:8]])).cuda()
    from rulka.agents.iqn.network import mean_q

    for n in (1, 2, 4, 8):
        taus = ((torch.arange(K, device="cuda") + 0.5) / K).repeat_interleave(n)
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
            for _ in range(5):
                mean_q(graph.net, img[:n], flt[:n], K, taus)
            torch.cuda.synchronize()
            t0, reps = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds:
                mean_q(graph.net, img[:n], flt[:n], K, taus).cpu()
                reps += 1
        batched[str(n)] = round((time.perf_counter() - t0) / reps * 1000, 3)
    free, total = torch.cuda.mem_get_info()
    rows.append({"network": name, "device": "cuda", "path": "batched", "ms_per_forward_of_n": batched,
                 "torch_allocated_mb": round(torch.cuda.memory_allocated() / 2**20, 1),
                 "device_used_mb": round((total - free) / 2**20, 1),
                 "gpu": torch.cuda.get_device_name(0)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s rounds, 1 round, 50 frames, no compile")
    parser.add_argument("--seconds", type=float, default=2.0, help="each timed round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path (median)")
    parser.add_argument("--frames", type=int, default=200, help="recorded frames each path acts on (agreement)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row (slow to build)")
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu, cuda")
    parser.add_argument("--parts", default="results,paths", help="comma-separated: results, paths")
    args = parser.parse_args()
    seconds, rounds, n_frames = (0.5, 1, 50) if args.quick else (args.seconds, args.rounds, args.frames)
    torch.set_num_threads(1)
    parts, devices = args.parts.split(","), args.devices.split(",")
    out: dict[str, Any] = {"bench": "actor", "k": K, "torch_threads": 1}
    if "results" in parts:
        out["results"] = [measure(name, net, seconds, rounds) for name, net in NETWORKS.items()]
    if "paths" in parts:
        out["paths"] = []
        for name, net in IMAGE_NETWORKS.items():
            frames = recorded_frames(n_frames, net["image_width"], net["image_height"])
            if "cpu" in devices:
                out["paths"] += cpu_paths(name, net, frames, seconds, rounds, not (args.quick or args.no_compile))
                out["paths"].append(cpu_batched(name, net, frames, seconds))
            if "cuda" in devices:
                out["paths"] += cuda_paths(name, net, frames, seconds, rounds)
        out["best_cpu"] = best_paths(out["paths"], n_frames, SHIPPED_CPU_PATHS)
        out["best_cpu_any"] = best_paths(out["paths"], n_frames, None)
        cuda_graph = [r for r in out["paths"] if r["device"] == "cuda" and r["path"] == "graph" and "ms" in r]
        out["cuda_guide_step_ms"] = next((r["ms"] for r in cuda_graph if r["network"] == "guide160x120"), "not measured")
    out["targets"] = TARGETS
    out["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0],
                      "torch": torch.__version__}
    out["date"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
