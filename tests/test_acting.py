"""The worker's batch-1 actor paths (``IQNActor.accelerate``, ``rulka.agents.acting``,
``rulka.nn.inference``): the same greedy actions as the eager actor, before and after new weights,
on CPU here and on CUDA where torch sees a GPU; ``worker.device: cuda`` without one stops a run
with one line naming the setting."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.actor import SEED
from rulka.agents.acting import build_actor, prepare_actor
from rulka.agents.iqn import IQNActor, IQNNetworkSpec
from rulka.agents.iqn.network import mean_q
from rulka.config import config_from_dict
from rulka.errors import ConfigError
from rulka.nn.inference import onnxruntime_missing

REPO = Path(__file__).resolve().parents[1]
GUIDE = dict(float_dim=184, n_actions=12, float_hidden_dim=256, dense_hidden_dimension=1024,
             image_height=120, image_width=160)  # configs/default.yaml's network
SMALL = dict(float_dim=184, n_actions=12, float_hidden_dim=128, dense_hidden_dimension=256,
             image_height=36, image_width=48)  # the sim's image network
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ort = pytest.mark.skipif(onnxruntime_missing() is not None, reason="needs rulka[onnx] (onnxruntime, onnx)")


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as a worker acts (``worker.torch_threads``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def actor(net: dict, seed: int = 0) -> IQNActor:
    from bench.actor import actor_for

    return actor_for(net, seed)


def frames(n: int, net: dict) -> tuple[list[dict[str, np.ndarray]], dict]:
    """``n`` frames recorded from the simulator (seeded) and ``net`` normalised on them."""
    from bench.actor import normalised, recorded_frames

    obs = recorded_frames(n, net["image_width"], net["image_height"], seed=0)
    return obs, normalised(net, obs)


def eager_greedy(a: IQNActor, obs: list[dict[str, np.ndarray]], chunk: int = 50) -> np.ndarray:
    """The eager network's greedy actions (``mean_q`` over the midpoint taus), ``chunk`` frames a forward."""
    out = []
    with torch.inference_mode():
        for i in range(0, len(obs), chunk):
            part = obs[i:i + chunk]
            img = torch.from_numpy(np.stack([o["img"] for o in part]))
            flt = torch.from_numpy(np.stack([o["float"] for o in part]))
            taus = a._midpoints.repeat_interleave(len(part))
            out.append(mean_q(a.net, img, flt, a.iqn_k, taus).argmax(dim=1).numpy())
    return np.concatenate(out)


@pytest.mark.parametrize("n", [200, pytest.param(1000, marks=pytest.mark.extended)])
def test_int8_path_acts_as_eager_on_recorded_frames(n: int) -> None:
    """The CPU path a worker keeps (int8 heads, float32 deciding near ties) on the guide-size
    network (bench/actor.py's initialisation): every greedy action equals eager's, the float32
    re-check ran on a share of the frames only, and (1,000 frames) it overruled int8 at least once:
    int8 alone is not exact, the re-check is what makes it so."""
    obs, net = frames(n, GUIDE)
    eager = actor(net, SEED)
    fast = actor(net, 2)
    fast.load_weights(eager.get_weights())
    fast.accelerate("cpu", int8=True)
    want = eager_greedy(eager, obs)
    got = np.array([fast.act(o, test=True) for o in obs])
    assert (got == want).all(), f"{int((got != want).sum())} of {n} greedy actions differ"
    assert len(set(want.tolist())) > 1  # the frames do not all lead to one action
    f = fast._fast
    assert f is not None and 0 < f.int8_rechecks < 0.7 * n  # int8 decided most frames
    if n >= 1000:
        assert f.int8_overruled > 0


@pytest.mark.parametrize("int8", [False, True])
def test_weights_swap_reaches_the_batch1_path(int8: bool) -> None:
    """Before and after new weights the accelerated actor acts as eager (so nothing derived from
    the old weights, the greedy embedding or the int8 copy, survives the swap)."""
    obs, net = frames(120, SMALL)
    eager, fast = actor(net, 0), actor(net, 0)
    fast.accelerate("cpu", int8=int8)
    before = eager_greedy(eager, obs)
    assert [fast.act(o, test=True) for o in obs] == before.tolist()
    new = actor(net, 1).get_weights()
    eager.load_weights(new)
    fast.load_weights(new)
    after = eager_greedy(eager, obs)
    assert (after != before).any()  # the new weights act differently: the swap is visible
    assert [fast.act(o, test=True) for o in obs] == after.tolist()
    # exploring goes through the same path: Q per action, actions in range
    a, info = fast.act_with_info(obs[0], test=False)
    assert 0 <= a < 12 and info["q_values"].shape == (12,)



def test_new_weights_reach_the_int8_heads_without_stalling_the_actor() -> None:
    """A weights swap does not wait for the int8 heads to be rebuilt (0.2-0.3 s here): the actor
    acts at once with the float32 heads, then with the new weights' int8 heads, as eager does."""
    obs, net = frames(60, GUIDE)
    eager, fast = actor(net, SEED), actor(net, SEED)
    fast.accelerate("cpu", int8=True)
    new = actor(net, 0).get_weights()
    eager.load_weights(new)
    fast.load_weights(new)
    want = eager_greedy(eager, obs).tolist()
    assert fast.act(obs[0], test=True) == want[0]  # at once, whether the int8 heads are ready or not
    f = fast._fast
    assert f is not None and f.wait_built(120)
    calls, rechecks = f.calls, f.int8_rechecks
    assert [fast.act(o, test=True) for o in obs] == want
    assert f.int8_rechecks - rechecks < f.calls - calls  # int8 decided some of them


def test_prepare_actor_follows_worker_device() -> None:
    cfg = config_from_dict({"worker": {"device": "cpu", "cpu_int8": False}})
    a = build_actor("iqn", {"network": dataclasses.asdict(IQNNetworkSpec(embedding_dimension=64, **SMALL))}, cfg)
    assert a.device.type == "cpu" and a._fast is not None and not a._fast.int8

    class Plain:  # an actor plugin without accelerate(): used as built
        pass

    plain = Plain()
    assert prepare_actor(plain, cfg) is plain
    with pytest.raises(ConfigError, match="worker.device"):
        config_from_dict({"worker": {"device": "gpu"}})


def ort_actor(net: dict, weights: dict, int8: bool) -> IQNActor:
    """An actor on the ONNX Runtime path with ``weights``, its graph built (at the first frame's shapes)."""
    a = actor(net, 2)
    a.load_weights(weights)
    a.accelerate("cpu", int8=int8, runtime="onnxruntime")
    return a


def ort_greedy(a: IQNActor, obs: list[dict[str, np.ndarray]]) -> np.ndarray:
    """``a``'s greedy actions once its graph of the current weights is built; every one of them by ONNX Runtime."""
    f = a._fast
    assert f is not None
    a.act(obs[0], test=True)  # the first observation fixes the graph's shapes
    assert f.wait_built(180)
    calls = f.ort_calls
    got = np.array([a.act(o, test=True) for o in obs])
    assert f.ort_calls - calls == len(obs)  # ONNX Runtime, not torch, decided each of them
    return got


@ort
def test_onnxruntime_path_acts_as_eager_on_1000_recorded_frames_before_and_after_new_weights() -> None:
    """The sim's 48x36 network, whose whole step ONNX Runtime runs (worker.cpu_runtime): its
    greedy actions equal eager torch's on 1,000 recorded frames; then two weights versions land
    back to back (the first one's graph, if built, is dropped) and the graph of the last one acts
    as eager does with it; exploring Q under sampled taus is torch's too."""
    obs, net = frames(1000, SMALL)
    eager = actor(net, SEED)
    fast = ort_actor(net, eager.get_weights(), int8=False)
    before = eager_greedy(eager, obs)
    got = ort_greedy(fast, obs)
    assert (got == before).all(), f"{int((got != before).sum())} of 1000 greedy actions differ"
    assert len(set(before.tolist())) > 1
    f = fast._fast
    assert f is not None and not f.int8 and f.ort_builds == 1
    fast.load_weights(actor(net, 0).get_weights())
    new = actor(net, 3).get_weights()
    eager.load_weights(new)
    fast.load_weights(new)
    after = eager_greedy(eager, obs)
    assert (after != before).any()  # the new weights act differently: the swap is visible
    got = ort_greedy(fast, obs)
    assert (got == after).all(), f"{int((got != after).sum())} of 1000 greedy actions differ after the swap"
    assert 2 <= f.ort_builds <= 3
    taus = np.linspace(0.01, 0.99, 32, dtype=np.float32)
    o = obs[3]
    q = f(o["img"], o["float"], taus, False)
    with torch.inference_mode():
        want = eager.net(torch.from_numpy(o["img"][None]), torch.from_numpy(o["float"][None]), torch.from_numpy(taus))
    np.testing.assert_allclose(q, want.mean(dim=0).numpy(), rtol=1e-4, atol=1e-5)


@ort
@pytest.mark.parametrize("n", [120, pytest.param(1000, marks=pytest.mark.extended)])
def test_onnxruntime_features_with_int8_heads_act_as_eager(n: int) -> None:
    """The guide-size network with cpu_int8 and ONNX Runtime: ONNX Runtime computes the features
    and the int8 heads (its float32 heads deciding near ties); every greedy action is eager's."""
    obs, net = frames(n, GUIDE)
    eager = actor(net, SEED)
    fast = ort_actor(net, eager.get_weights(), int8=True)
    want = eager_greedy(eager, obs)
    got = ort_greedy(fast, obs)
    assert (got == want).all(), f"{int((got != want).sum())} of {n} greedy actions differ"
    f = fast._fast
    assert f is not None and f.int8 and f._head8 is not None and f.int8_rechecks < f.calls
    assert f._ort_heads is not None  # ONNX Runtime's int8 heads decided, not torch's
    heads = f._ort_heads
    new = actor(net, 3).get_weights()  # a new version: the heads are built again from it
    eager.load_weights(new)
    fast.load_weights(new)
    want = eager_greedy(eager, obs)
    got = ort_greedy(fast, obs)
    assert (got == want).all(), f"{int((got != want).sum())} of {n} greedy actions differ after new weights"
    assert f._ort_heads is not None and f._ort_heads is not heads


def test_weights_faster_than_builds_take_a_bounded_share_of_a_core(monkeypatch) -> None:
    """Versions landing back to back: the builder coalesces them (the newest is built) and waits
    3x a build's time before the next one (BUILD_DUTY 0.25), while torch acts meanwhile."""
    from rulka.agents.iqn.actor import BUILD_DUTY, _TorchMeanQ

    starts: list[float] = []

    def slow_build(self):  # stands in for an export: 0.1 s of work
        starts.append(time.monotonic())
        time.sleep(0.1)
        return lambda *arrays: np.zeros(12, np.float32)

    monkeypatch.setattr(_TorchMeanQ, "_build_ort", slow_build)
    obs, net = frames(3, SMALL)
    a = actor(net, 0)
    a.accelerate("cpu", runtime="onnxruntime")
    a.act(obs[0], test=True)  # fixes the shapes: the first build
    versions = [actor(net, s).get_weights() for s in (1, 2, 3)]
    for w in versions:
        a.load_weights(w)
        a.act(obs[1], test=True)  # torch acts while the graph is rebuilt
    assert a._fast.wait_built(30)
    assert 2 <= len(starts) <= 3  # four versions asked for, coalesced
    gaps = np.diff(starts)
    assert (gaps >= 0.1 * (1 / BUILD_DUTY) * 0.95).all(), gaps


@ort
def test_prepare_actor_follows_worker_cpu_runtime() -> None:
    spec = {"network": dataclasses.asdict(IQNNetworkSpec(embedding_dimension=64, **SMALL))}
    for setting, runtime_on in (("onnxruntime", True), ("auto", True), ("torch", False)):
        cfg = config_from_dict({"worker": {"device": "cpu", "cpu_runtime": setting}})
        a = build_actor("iqn", spec, cfg)
        assert a._fast is not None and a._fast.ort is runtime_on, setting
    with pytest.raises(ConfigError, match="worker.cpu_runtime"):
        config_from_dict({"worker": {"cpu_runtime": "openvino"}})


def test_worker_cpu_runtime_onnxruntime_without_it_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Asking for ONNX Runtime where it is not installed (hidden here from the child process)
    stops ``rulka run`` before anything starts, with one line naming the setting; ``auto`` falls
    back to torch."""
    hide = ("import runpy, sys; sys.modules['onnxruntime'] = None; sys.argv[0] = 'rulka'; "
            "runpy.run_module('rulka.cli', run_name='__main__')")
    proc = subprocess.run(
        [sys.executable, "-c", hide, "run", str(REPO / "configs" / "sim_iqn.yaml"), "--workers", "1",
         "--minutes", "0.1", "--run-dir", str(tmp_path / "run"), "--set", "worker.device=cpu",
         "--set", "worker.cpu_runtime=onnxruntime"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "worker.cpu_runtime" in lines[0] and "onnxruntime" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()  # nothing started
    probe = ("import sys; sys.modules['onnxruntime'] = None\n"
             "from rulka.config import config_from_dict\n"
             "print(config_from_dict({'worker': {'cpu_runtime': 'auto'}}).worker.cpu_runtime_here())")
    auto = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert auto.stdout.strip() == "torch", auto.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_worker_device_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rulka.cli", "run", str(REPO / "configs" / "sim_iqn.yaml"), "--workers", "1",
         "--minutes", "0.1", "--run-dir", str(tmp_path / "run"), "--set", "worker.device=cuda"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "worker.device" in lines[0] and "cuda" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()  # nothing started


@cuda
def test_cuda_graph_acts_as_eager_before_and_after_a_weights_swap() -> None:
    """On a GPU: the captured fp16 path picks eager fp16's greedy actions, the new weights reach
    the graph captured before them, and no graph is captured again."""
    obs, net = frames(200, GUIDE)
    eager, fast = actor(net, SEED), actor(net, SEED)
    fast.accelerate("cuda")
    eager.net.to("cuda")

    def eager_fp16() -> list[int]:
        out = []
        for o in obs:
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
                q = mean_q(eager.net, torch.from_numpy(o["img"][None]).cuda(), torch.from_numpy(o["float"][None]).cuda(),
                           32, eager._midpoints.cuda())
            out.append(int(q.float().argmax()))
        return out

    def agree() -> float:
        return float(np.mean([fast.act(o, test=True) == w for o, w in zip(obs, eager_fp16())]))

    assert agree() >= 0.99  # fp16 rounding may differ between fused and unfused kernels at exact ties
    step = fast._fast._graphs[False]
    ptrs = [p.data_ptr() for p in fast.net.parameters()]
    new = actor(net, 0).get_weights()
    eager.load_weights(new)
    fast.load_weights(new)
    assert agree() >= 0.99
    assert fast._fast._graphs[False] is step and [p.data_ptr() for p in fast.net.parameters()] == ptrs
