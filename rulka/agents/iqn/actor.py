"""``IQNActor``: the IQN policy a worker runs (epsilon-greedy + epsilon-Boltzmann exploration, and
NoisyNet's sampled weights when the network has noisy layers)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, mean_q
from rulka.interfaces import ActorModule, Weights
from rulka.nn.blocks import DuelingHead, NoisyLinear, cosine_embedding
from rulka.nn.numpy_forward import UnsupportedModule, compile_sequential, run_steps, to_f32

log = logging.getLogger(__name__)
# int8 heads only pay where the heads' dense layers are large (the guide-size network's 6.0 M
# weights: 1.64x eager per CPU-second; the 48x36 network's: slower than float32, bench/actor.py)
INT8_MIN_HEAD_WEIGHTS = 1_000_000
# the share of one core that rebuilding the int8 heads and the ONNX Runtime graph for new weights
# may take when versions arrive faster than builds (a build of t seconds waits 3t before the next;
# torch acts with the new weights meanwhile)
BUILD_DUTY = 0.25

EXPLORATION_KEY = "exploration"  # weights entry [epsilon, epsilon_boltzmann, tau_epsilon_boltzmann]


def split_obs(obs: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """(image or None, float vector) from a Dict observation ``{"img", "float"}`` or a plain array."""
    if isinstance(obs, dict):
        img = obs.get("img")
        flt = obs.get("float", obs.get("x"))
        return (None if img is None else np.asarray(img)), np.asarray(flt, dtype=np.float32).reshape(-1)
    return None, np.asarray(obs, dtype=np.float32).reshape(-1)


class _NumpyMeanQ:
    """``mean_q`` of a float-only IQN network in numpy, for acting on one observation on CPU.

    Same arithmetic as the torch network (float normalisation, float MLP, with pre_tau the shared
    trunk, cosine embedding of the taus, element-wise product, dueling head, mean over the taus) at a fraction of torch's
    per-op cost at batch 1. Built from the network's current weights: rebuild after loading."""

    def __init__(self, net: IQNNetwork, k: int) -> None:
        if not net.plain_encoder:
            raise UnsupportedModule("image heads and fusion trunks stay in torch")
        # one advantage stream, or one per action branch (multi-action blocks)
        self._streams = list(getattr(net.head.advantage, "branches", [net.head.advantage]))
        if not isinstance(net.head.value, nn.Sequential) or not all(isinstance(m, nn.Sequential) for m in self._streams):
            raise UnsupportedModule("transformer decoder heads stay in torch")
        self.features = compile_sequential(net.float_feature_extractor)
        # pre_tau: the shared dense layer, once per observation before the taus (no steps for post_tau)
        self.trunk = compile_sequential(net.trunk) if net.trunk is not None else []
        self.embedding = compile_sequential(net.iqn_fc)
        self.value = compile_sequential(net.head.value)
        self.advantage = [compile_sequential(m) for m in self._streams]
        self.noisy_value, self.noisy_advantage = self.value, self.advantage
        self.mean = to_f32(net.float_mean)
        self.std = to_f32(net.float_std)
        self.k = k
        self.freqs = np.pi * np.arange(1, net.embedding_dimension + 1, dtype=np.float32)
        self.strata = np.arange(k // 2, dtype=np.float32)
        midpoints = (np.arange(k, dtype=np.float32) + 0.5) / k
        self.midpoint_embedding = self._embed(midpoints)  # the greedy (test) taus never change

    def resample(self, net: IQNNetwork) -> None:
        """Take the heads' current noise sample (after the torch layers' ``reset_noise``)."""
        self.noisy_value = compile_sequential(net.head.value, noise=True)
        self.noisy_advantage = [compile_sequential(m, noise=True) for m in self._streams]

    def _embed(self, taus: np.ndarray) -> np.ndarray:
        return run_steps(self.embedding, np.cos(taus[:, None] * self.freqs))

    def __call__(self, flt: np.ndarray, rng: np.random.Generator | None, noise: bool = False) -> np.ndarray:
        """Mean Q per action; ``rng`` None: the midpoint taus, else stratified mirrored draws;
        ``noise``: the heads' noise sample (see ``resample``), else their mean weights."""
        feats = run_steps(self.trunk, run_steps(self.features, ((flt - self.mean) / self.std)[None]))
        if rng is None:
            emb = self.midpoint_embedding
        else:
            low = (self.strata + rng.random(self.k // 2, dtype=np.float32)) / self.k
            emb = self._embed(np.concatenate([low, 1.0 - low]))
        x = feats * emb  # (k, width): the features broadcast over the taus
        value, streams = (self.noisy_value, self.noisy_advantage) if noise else (self.value, self.advantage)
        v = run_steps(value, x)
        qs = []
        for stream in streams:  # per branch: V + A_d - mean A_d (rulka.agents.iqn.branching)
            adv = run_steps(stream, x)
            qs.append(v + adv - adv.mean(axis=1, keepdims=True))
        q = qs[0] if len(qs) == 1 else np.concatenate(qs, axis=1)
        return q.mean(axis=0, dtype=np.float32)


def stratified_taus(rng: np.random.Generator, k: int) -> np.ndarray:
    """One observation's ``k`` stratified mirrored quantile fractions (``stratified_mirrored_taus``
    at batch 1), drawn from a numpy generator."""
    low = (np.arange(k // 2, dtype=np.float32) + rng.random(k // 2, dtype=np.float32)) / k
    return np.concatenate([low, 1.0 - low])


def _centred(advantage: torch.Tensor) -> torch.Tensor:
    """``DuelingHead.combine`` without the value stream: Q less the state's value, per tau."""
    return advantage - advantage.mean(dim=-1, keepdim=True)


class _ExportedStep(nn.Module):
    """What ``_TorchMeanQ`` hands ONNX Runtime: the features of one observation ``(img, float)``,
    or (``features_only`` False) its mean Q over the taus given, ``(img, float, taus)``; without
    an image the same less ``img``."""

    def __init__(self, net: IQNNetwork, features_only: bool, with_image: bool) -> None:
        super().__init__()
        self.net, self.features_only, self.with_image = net, features_only, with_image

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        img, rest = (inputs[0], inputs[1:]) if self.with_image else (None, inputs)
        feats = self.net.features(img, rest[0])
        if self.features_only:
            return feats
        emb = self.net.iqn_fc(cosine_embedding(rest[1], self.net.embedding_dimension))
        return self.net.head(feats * emb).mean(dim=0)


class _AdvantageStep(nn.Module):
    """The dueling heads' centred advantages averaged over the taus, of the features already
    multiplied by the taus' embedding (``(k, width)``): what ONNX Runtime's int8 heads run."""

    def __init__(self, head: DuelingHead) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _centred(self.head.advantage(x)).mean(dim=0)


class _TorchMeanQ:
    """``mean_q`` of one observation in torch, the worker's batch-1 path (``IQNActor.accelerate``).

    The same arithmetic as ``mean_q``, less its per-call waste: the features broadcast over the
    taus instead of being repeated, and the greedy taus' embedding (fixed midpoints) computed once
    per weights version, and the CNN in channels_last. On CUDA the step runs in fp16 autocast,
    captured once per noise mode as a CUDA graph (``rulka.nn.inference.GraphStep``) that reads the
    parameters in place, so a weights swap needs no re-capture. On CPU, ``int8`` (heads of at
    least ``INT8_MIN_HEAD_WEIGHTS`` weights): the dueling heads (the bulk of the arithmetic: k
    rows through the first dense layers) run with int8
    weights (``rulka.nn.inference.int8_linears``), and whenever the two best actions are closer
    than ``int8_guard`` times the spread of Q over the actions, the float32 advantage stream
    decides instead (the value stream shifts every action alike). On the guide-size network int8
    moved the difference between two actions' Q by at most 3.7% of that spread (1,000 simulator
    frames, two initialisations), so the default guard, 10%, leaves the greedy action float32's
    (``tests/test_acting.py`` checks it on 1,000 recorded frames). With the int8 heads the value
    stream is left out: it adds the same to every action, so no choice depends on it, and the Q
    this path returns (``q_values``, recorded as ``extra/q_values``) is each action's advantage
    centred over the actions, Q less the state's value.

    On CPU, ``runtime="onnxruntime"`` (``worker.cpu_runtime``; networks without noisy layers):
    ONNX Runtime runs the whole step (features, tau embedding, heads, mean over the taus; float32)
    where the heads stay float32; where the int8 heads apply it runs the features (CNN and float
    MLP) and the advantages in int8 (``rulka.nn.inference.ort_int8``: at most 3.0% of the spread
    on the frames above, against torch's 4.4%), its float32 advantages deciding the near ties as
    above, and torch's int8 heads act until those graphs are built (``OrtStep``; bench/actor.py
    measures each path). The graph is exported from a copy of this network at the first observation's shapes and
    again for each weights version, on a thread of its own like the int8 heads; the actor acts
    with torch until the new version's graph is in place. An export that fails is logged once and
    torch acts from then on."""

    def __init__(self, net: IQNNetwork, k: int, device: torch.device, *, cuda_graph: bool = True,
                 half: bool = True, int8: bool = False, int8_guard: float = 0.1, runtime: str = "torch") -> None:
        self.net, self.k, self.device = net, k, device
        self.uses_image = net.spec.uses_image
        self.cuda = device.type == "cuda"
        self.midpoints = (torch.arange(k, dtype=torch.float32, device=device) + 0.5) / k
        self._midpoints_np = self.midpoints.cpu().numpy()
        self.cuda_graph, self.half = cuda_graph and self.cuda, half and self.cuda
        linears = [m for m in net.head.modules() if isinstance(m, nn.Linear)]
        noisy = any(isinstance(m, NoisyLinear) for m in net.modules())
        self.int8 = (int8 and not self.cuda and type(net.head) is DuelingHead and net.spec.n_actions > 1
                     and not noisy and sum(m.weight.numel() for m in linears) >= INT8_MIN_HEAD_WEIGHTS)
        self.int8_guard = float(int8_guard)
        self.int8_rechecks = 0  # decisions the float32 advantages took over (a near tie under int8)
        self.int8_overruled = 0  # of those, the ones where int8's own argmax was not float32's
        self.ort = runtime == "onnxruntime" and not self.cuda and not noisy
        self.ort_calls = 0  # decisions (or feature passes, with int8 heads) ONNX Runtime made
        self.ort_builds = 0  # graphs built (one per weights version that stayed long enough)
        self.calls = 0
        self._graphs: dict[bool, Any] = {}
        self._greedy_emb: torch.Tensor | None = None
        self._head8: nn.Module | None = None
        self._ort_step: Any = None  # the OrtStep of the current weights, once built
        # with int8 and ONNX Runtime: the advantages in int8 and in float32 (the near ties' check)
        self._ort_heads: tuple[Any, Any] | None = None
        self.ort_heads_ok = True  # False once they could not be built (torch's int8 heads act)
        self._shapes: tuple[tuple[int, ...], ...] | None = None  # the observations' ([img,] float) shapes
        self._lock = threading.Lock()
        self._version = 0  # weights versions seen (``invalidate``)
        self._target = 0  # the version whose weights are fully loaded (``refresh``): what a build copies
        self._building = False
        self._builder: threading.Thread | None = None
        self._next_build_t = 0.0  # the builder starts no build before this (monotonic time)
        if net.img_head is not None:  # CUDA and CPU alike (bench/actor.py: faster on both CPU networks)
            net.img_head.to(memory_format=torch.channels_last)
        self.refresh(background=False)

    def invalidate(self) -> None:
        """Before new weights are loaded: nothing derived from the old ones is used from now on."""
        with self._lock:
            self._version += 1
            self._head8 = None
            self._ort_step = None
            self._ort_heads = None
            self._greedy_emb = None

    def refresh(self, background: bool = True) -> None:
        """After new weights (captured graphs keep reading the parameters in place and stay): the
        int8 heads and the ONNX Runtime graph are built again, on a thread of their own with
        ``background`` (the worker acts with float32 torch meanwhile instead of stalling the game:
        0.2-0.3 s for the int8 heads on the 2-core machine, about 1 s for a graph), else at once.
        One builder at a time: weights that arrive during a build are built next, and a build
        whose weights were replaced meanwhile is dropped; builds take at most ``BUILD_DUTY`` of a
        core (a graph is 0.4-1 s of CPU, and a trainer may publish every few seconds)."""
        self._greedy_emb = None
        if not (self.int8 or self.ort):
            return
        with self._lock:
            self._target = self._version
            if self._building:
                return  # the running builder sees the new target when it finishes
            self._building = True
        if background:
            self._builder = threading.Thread(target=self._build_loop, name="batch1-build", daemon=True)
            self._builder.start()
        else:
            self._build_loop()

    def _build_loop(self) -> None:
        while True:
            wait = self._next_build_t - time.monotonic()
            if wait > 0:  # weights arriving faster than builds take no more than BUILD_DUTY of a core
                time.sleep(wait)
            with self._lock:
                version = self._target
            t0 = time.monotonic()
            head8 = self._build_int8() if self.int8 else None
            ort_step = self._build_ort() if self.ort and self._shapes is not None else None
            ort_heads = self._build_ort_heads() if ort_step is not None and self.int8 and self.ort_heads_ok else None
            self._next_build_t = time.monotonic() + (time.monotonic() - t0) * (1 / BUILD_DUTY - 1)
            with self._lock:
                if self._version == version:  # else newer weights came meanwhile: the next pass has them
                    self._head8, self._ort_step, self._ort_heads = head8, ort_step, ort_heads
                if self._target == version:
                    self._building = False
                    return

    def _build_int8(self) -> nn.Module | None:
        from rulka.nn.inference import int8_linears

        try:
            return int8_linears(self.net.head)
        except Exception as exc:  # noqa: BLE001 - the float32 heads act instead
            log.warning("int8 heads not built, float32 acts: %s", str(exc)[:200])
            self.int8 = False
            return None

    def _build_ort(self) -> Any:
        """An ``OrtStep`` of a copy of the current weights: the whole step of ([img,] float, taus),
        or with int8 heads the features of ([img,] float)."""
        import copy

        from rulka.nn.inference import OrtStep

        assert self._shapes is not None
        with_image = len(self._shapes) == 2
        try:
            net = copy.deepcopy(self.net).eval()
            example = [torch.zeros(s, dtype=torch.uint8 if with_image and i == 0 else torch.float32)
                       for i, s in enumerate(self._shapes)]
            step = OrtStep(_ExportedStep(net, features_only=self.int8, with_image=with_image),
                           example + ([] if self.int8 else [self.midpoints]),
                           threads=torch.get_num_threads())  # worker.torch_threads, as torch would use
        except Exception as exc:  # noqa: BLE001 - an export this torch or runtime cannot do: torch acts
            log.warning("ONNX Runtime graph not built, torch acts: %s", str(exc)[:200])
            self.ort = False
            return None
        self.ort_builds += 1
        return step

    def _build_ort_heads(self) -> tuple[Any, Any] | None:
        """ONNX Runtime's advantages of a copy of the current heads: int8 (``ort_int8``) and float32
        (what decides a near tie). ONNX Runtime's int8 heads measured 1.3x torch's on the guide-size
        network (bench/actor.py ``ort_int8``); torch's int8 heads act until these are built, and
        instead of them if they cannot be."""
        import copy

        from rulka.nn.inference import OrtStep

        try:
            head = copy.deepcopy(self.net.head).eval()
            width = next(m for m in head.advantage.modules() if isinstance(m, nn.Linear)).in_features
            example = [torch.zeros(self.k, width)]
            exact, int8 = OrtStep.float_and_int8(_AdvantageStep(head), example, threads=torch.get_num_threads())
            return int8, exact
        except Exception as exc:  # noqa: BLE001 - torch's int8 heads act instead
            log.warning("ONNX Runtime int8 heads not built, torch's act: %s", str(exc)[:200])
            self.ort_heads_ok = False
            return None

    def wait_built(self, timeout: float | None = None) -> bool:
        """Wait for the int8 heads and the ONNX Runtime graph of the current weights (tests,
        benchmarks); whether all that applies is in use."""
        if self._builder is not None:
            self._builder.join(timeout)
        return ((not self.int8 or self._head8 is not None) and (not self.ort or self._ort_step is not None)
                and (not (self.ort and self.int8 and self.ort_heads_ok) or self._ort_heads is not None))

    def _embed(self, taus: torch.Tensor) -> torch.Tensor:
        return self.net.iqn_fc(cosine_embedding(taus, self.net.embedding_dimension))

    def _step(self, img: torch.Tensor | None, flt: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """(A,) mean Q; on CUDA the captured function."""
        return self.net.head(self.net.features(img, flt) * self._embed(taus)).mean(dim=0)

    def _observed(self, arrays: tuple[np.ndarray, ...]) -> None:
        """The first observation: its shapes fix the ONNX Runtime graph's inputs; build it."""
        self._shapes = tuple(a.shape for a in arrays)
        self.refresh()

    def _cpu(self, img: torch.Tensor | None, flt: torch.Tensor, taus: torch.Tensor | None) -> torch.Tensor:
        ort_step = self._ort_step
        if ort_step is not None:
            arrays = (flt.numpy(),) if img is None else (img.numpy(), flt.numpy())
            if tuple(a.shape for a in arrays) == self._shapes:
                self.ort_calls += 1
                if not self.int8:
                    return torch.from_numpy(ort_step(*arrays, self._midpoints_np if taus is None else taus.numpy()))
                return self._heads(torch.from_numpy(ort_step(*arrays)), taus)
        elif self.ort and self._shapes is None:
            self._observed((flt.numpy(),) if img is None else (img.numpy(), flt.numpy()))
        return self._heads(self.net.features(img, flt), taus)

    def _heads(self, feats: torch.Tensor, taus: torch.Tensor | None) -> torch.Tensor:
        if taus is None:
            if self._greedy_emb is None:
                self._greedy_emb = self._embed(self.midpoints)
            emb = self._greedy_emb
        else:
            emb = self._embed(taus)
        x = feats * emb  # (k, width): the features broadcast over the taus
        ort_heads = self._ort_heads
        if ort_heads is not None and x.shape[0] == self.k:
            xn = x.numpy()
            q8 = ort_heads[0](xn)
            top2 = np.partition(q8, len(q8) - 2)[-2:]
            if float(top2[1] - top2[0]) >= self.int8_guard * float(q8.max() - q8.min()):
                return torch.from_numpy(q8)
            self.int8_rechecks += 1
            exact = ort_heads[1](xn)
            self.int8_overruled += int(exact.argmax() != q8.argmax())
            return torch.from_numpy(exact)
        head8 = self._head8
        if head8 is not None:
            # the value stream adds the same to every action: a choice (greedy, Boltzmann) needs only
            # the advantages, so it is not computed (half the heads' work; the Q returned omits it)
            q = _centred(head8.advantage(x)).mean(dim=0)
            top2 = torch.topk(q, 2).values
            if float(top2[0] - top2[1]) >= self.int8_guard * float(q.max() - q.min()):
                return q
            # a near tie: the float32 advantages decide
            self.int8_rechecks += 1
            exact = _centred(self.net.head.advantage(x)).mean(dim=0)
            self.int8_overruled += int(torch.argmax(exact) != torch.argmax(q))
            return exact
        return self.net.head(x).mean(dim=0)

    def _cuda(self, inputs: list[torch.Tensor], noise: bool) -> torch.Tensor:
        """``inputs``: [img,] flt, taus on the device (img only for image networks)."""
        fn = self._step if len(inputs) == 3 else (lambda f, t: self._step(None, f, t))
        if self.cuda_graph and noise not in self._graphs:
            from rulka.nn.inference import GraphStep

            try:
                self._graphs[noise] = GraphStep(fn, inputs, half=self.half)
            except RuntimeError as exc:  # an op that cannot be captured: eager (still fp16) from now on
                log.warning("CUDA graph capture failed, acting eagerly: %s", str(exc)[:200])
                self.cuda_graph = False
        if self.cuda_graph:
            return self._graphs[noise](*inputs)
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.half):
            return fn(*inputs).float()

    def __call__(self, img: np.ndarray | None, flt: np.ndarray, taus: np.ndarray | None, noise: bool) -> np.ndarray:
        """Mean Q per action; ``taus`` None: the greedy midpoints."""
        self.calls += 1
        with torch.inference_mode():
            img_t = None if img is None or not self.uses_image else torch.from_numpy(img[None])
            flt_t = torch.from_numpy(flt[None])
            if not self.cuda:
                q = self._cpu(img_t, flt_t, None if taus is None else torch.from_numpy(taus))
                return q.numpy().astype(np.float32, copy=False)
            taus_t = self.midpoints if taus is None else torch.from_numpy(taus).to(self.device)
            inputs = [flt_t.to(self.device), taus_t]
            if img_t is not None:
                inputs.insert(0, img_t.to(self.device))
            return self._cuda(inputs, noise).cpu().numpy().astype(np.float32)


class IQNActor(ActorModule):
    """Chooses actions from the mean of ``iqn_k`` quantiles.

    Exploration (not when ``test=True``), from one uniform draw ``r`` as Linesight does: ``r <
    epsilon`` a uniformly random action; ``r < epsilon + epsilon_boltzmann`` the argmax of ``Q +
    tau_epsilon_boltzmann * N(0, 1)``; otherwise the greedy action. So the shares are exactly
    ``epsilon`` and ``epsilon_boltzmann`` (their sum capped at 1).

    εz-greedy (``epsilon_z_exponent`` set; Dabney, Ostrovski and Barreto, "Temporally-Extended
    ε-Greedy Exploration", ICLR 2021): when the draw picks a uniformly random action it also draws a
    duration n from the zeta distribution P(n) = n^-exponent / sum_{k=1..N} k^-exponent on 1..N
    (N = ``epsilon_z_max_actions``), and that action is taken for n actions in all, the next n - 1
    without a draw; then the rule above again. The hold ends at ``reset()`` (episode start) and
    does not apply with ``test=True``. n = 1 always is plain epsilon-greedy.

    NoisyNet (a network with noisy layers, ``btr.use_noisy_linear``): exploring, Q comes from the
    heads' sampled weights, drawn from the actor's own generator (each worker its own) at every
    ``reset()`` (episode start) and, with ``noisy_resample_every_actions`` N > 0, every N actions
    too; with ``test=True`` (evaluation episodes, the best policy) from the mean weights. ``act_with_info`` records ``q_values`` and ``greedy``
    (whether the chosen action is the argmax of Q). With ``mini_race_actions`` set, the float
    slot 0 (mini-race time) is set to 0: acting always looks a full mini-race ahead.

    Exploring, Q is averaged over ``iqn_k`` sampled quantile fractions (as in training); with
    ``test=True`` over the ``iqn_k`` stratum midpoints ``(j + 0.5) / iqn_k``, so the greedy policy
    is a deterministic function of the observation and a race can be driven again.

    Multi-action blocks (a network with ``n_action_branches`` N > 1, ``rulka.agents.iqn.branching``):
    the action is an int64 array of N actions, each branch's greedy action the argmax of its own
    Q; exploring, ``multi_action_exploration`` says how the rule above applies (the guide's
    ``exploration.multi_action_exploration``): ``per_action``, one uniform draw per action, so
    each action of the block explores on its own; ``per_block``, one draw for the whole block,
    which is all random, all Boltzmann-perturbed or all greedy. ``greedy`` is True only when every
    action of the block is its branch's argmax.

    On CPU a float-only network acts through a numpy copy of its weights (``_NumpyMeanQ``, the
    same values; ``bench/actor.py`` measures it against torch at batch 1); image networks, GPU
    actors and ``numpy_inference=False`` use torch.
    """

    def __init__(self, network: dict[str, Any], iqn_k: int = 32, epsilon: float = 0.0,
                 epsilon_boltzmann: float = 0.0, tau_epsilon_boltzmann: float = 0.01,
                 mini_race_actions: int | None = None, seed: int | None = None, device: str = "cpu",
                 numpy_inference: bool = True, noisy_resample_every_actions: int = 0,
                 multi_action_exploration: str = "per_action", epsilon_z_exponent: float | None = None,
                 epsilon_z_max_actions: int = 100) -> None:
        if iqn_k % 2:
            raise ValueError("iqn_k must be even")
        if multi_action_exploration not in ("per_action", "per_block"):
            raise ValueError(f"multi_action_exploration must be per_action or per_block, got {multi_action_exploration!r}")
        self.multi_action_exploration = multi_action_exploration
        if epsilon_z_exponent is not None and (epsilon_z_exponent <= 0 or epsilon_z_max_actions < 1):
            raise ValueError("epsilon_z_exponent must be > 0 and epsilon_z_max_actions >= 1")
        # εz-greedy: the zeta distribution's CDF over durations 1..N (None: plain epsilon-greedy)
        self._duration_cdf: np.ndarray | None = None
        if epsilon_z_exponent is not None:
            mass = np.arange(1, int(epsilon_z_max_actions) + 1, dtype=np.float64) ** -float(epsilon_z_exponent)
            self._duration_cdf = np.cumsum(mass) / mass.sum()
        self._held_action = 0
        self._held_left = 0  # actions still to take with _held_action after the current one
        self.spec = IQNNetworkSpec.from_dict(dict(network))
        self.device = torch.device(device)
        self.net = IQNNetwork(self.spec).to(self.device).eval()
        self.iqn_k = int(iqn_k)
        self._midpoints = (torch.arange(self.iqn_k, dtype=torch.float32, device=self.device) + 0.5) / self.iqn_k
        self.epsilon = float(epsilon)
        self.epsilon_boltzmann = float(epsilon_boltzmann)
        self.tau_epsilon_boltzmann = float(tau_epsilon_boltzmann)
        self.mini_race_actions = mini_race_actions
        self.rng = np.random.default_rng(seed)
        self._tau_rng = self.rng.spawn(1)[0]  # the numpy path's taus; leaves self.rng's draws as they were
        self.numpy_inference = bool(numpy_inference)
        self._noisy = [m for m in self.net.modules() if isinstance(m, NoisyLinear)]
        self.noisy_resample_every_actions = int(noisy_resample_every_actions)
        self._noise_gen = torch.Generator().manual_seed(int(self.rng.spawn(1)[0].integers(2**63)))
        self.noise_draws = 0  # how many noise samples this actor has drawn
        self._actions_since_noise = 0
        self._numpy: _NumpyMeanQ | None = None
        self._fast: _TorchMeanQ | None = None  # the worker's batch-1 torch path (``accelerate``)
        self._refresh_numpy()
        self.resample_noise()

    def accelerate(self, device: str | torch.device = "cpu", *, int8: bool = False, cuda_graph: bool = True,
                   runtime: str = "torch") -> None:
        """Act through the batch-1 path on ``device`` (what a worker calls, ``worker.device``):
        on CUDA fp16 autocast, channels_last and a CUDA graph captured once; on CPU the float-only
        networks keep their numpy path and the others run ``_TorchMeanQ`` (``int8``: int8 heads
        with a float32 re-check of near ties; ``runtime="onnxruntime"``: ONNX Runtime runs what
        the int8 heads do not, ``worker.cpu_runtime``). Weights loaded later are copied into place."""
        self.device = torch.device(device)
        self.net.to(self.device)
        self._midpoints = self._midpoints.to(self.device)
        self._refresh_numpy()
        self._fast = None if self._numpy is not None else _TorchMeanQ(self.net, self.iqn_k, self.device,
                                                                         int8=int8, cuda_graph=cuda_graph,
                                                                         runtime=runtime)

    @property
    def noisy(self) -> bool:
        """Whether the network has noisy layers (NoisyNet exploration)."""
        return bool(self._noisy)

    def resample_noise(self) -> None:
        """Draw a new noise sample for the noisy layers (no-op without them)."""
        if not self._noisy:
            return
        with torch.no_grad():
            for m in self._noisy:
                m.reset_noise(self._noise_gen)
        if self._numpy is not None:
            self._numpy.resample(self.net)
        self.noise_draws += 1
        self._actions_since_noise = 0

    def reset(self) -> None:
        """Episode start: a new noise sample (NoisyNet); an εz-greedy hold ends."""
        self._held_left = 0
        self.resample_noise()

    def draw_duration(self) -> int:
        """εz-greedy: how many actions a new random action lasts (1 without ``epsilon_z_exponent``)."""
        if self._duration_cdf is None:
            return 1
        return int(np.searchsorted(self._duration_cdf, self.rng.random(), side="right")) + 1

    def _refresh_numpy(self) -> None:
        self._numpy = None
        if self.numpy_inference and self.device.type == "cpu":
            try:
                self._numpy = _NumpyMeanQ(self.net, self.iqn_k)
            except UnsupportedModule:
                return
            if self._noisy:
                self._numpy.resample(self.net)  # the noise sample drawn so far, on the new weights

    @property
    def uses_numpy(self) -> bool:
        """Whether this actor acts through its numpy copy of the network (float-only, CPU)."""
        return self._numpy is not None

    def q_values(self, obs: Any, test: bool = False) -> np.ndarray:
        """Mean Q per action for one observation (over the fixed midpoint fractions if ``test``)."""
        img, flt = split_obs(obs)
        if self.mini_race_actions:
            flt = flt.copy()
            flt[0] = 0.0
        noise = self.noisy and not test
        if self._numpy is not None:
            return self._numpy(flt, None if test else self._tau_rng, noise)
        for m in self._noisy:
            m.act_with_noise = noise
        if self._fast is not None:
            return self._fast(img, flt, None if test else stratified_taus(self._tau_rng, self.iqn_k), noise)
        with torch.inference_mode():  # less per-call bookkeeping than no_grad; outputs leave as numpy
            img_t = None if img is None or not self.spec.uses_image else torch.from_numpy(img[None]).to(self.device)
            flt_t = torch.from_numpy(flt[None]).to(self.device)
            taus = self._midpoints if test else None
            return mean_q(self.net, img_t, flt_t, self.iqn_k, taus)[0].cpu().numpy().astype(np.float32)

    def act_with_info(self, obs: Any, test: bool = False) -> tuple[Any, dict[str, Any]]:
        if not test and self._noisy and self.noisy_resample_every_actions > 0:
            if self._actions_since_noise >= self.noisy_resample_every_actions:
                self.resample_noise()
            self._actions_since_noise += 1
        q = self.q_values(obs, test)
        if self.spec.n_action_branches > 1:
            block, greedy = self.choose_block(q.reshape(self.spec.n_action_branches, -1), test)
            return block, {"q_values": q, "greedy": greedy}
        greedy_action = int(np.argmax(q))
        action = greedy_action
        if not test and self._held_left > 0:
            self._held_left -= 1
            action = self._held_action
        elif not test:
            r = self.rng.random()
            if r < self.epsilon:
                action = int(self.rng.integers(len(q)))
                self._held_action, self._held_left = action, self.draw_duration() - 1  # 0 without εz
            elif r < self.epsilon + self.epsilon_boltzmann:
                action = int(np.argmax(q + self.tau_epsilon_boltzmann * self.rng.standard_normal(len(q))))
        return action, {"q_values": q, "greedy": action == greedy_action}

    def choose_block(self, q: np.ndarray, test: bool = False) -> tuple[np.ndarray, bool]:
        """N actions from per-branch Q ``(N, A)`` with the exploration of the class docstring, and
        whether every one is its branch's argmax."""
        greedy = np.argmax(q, axis=1).astype(np.int64)
        block = greedy.copy()
        if test:
            return block, True
        n, a = q.shape
        draws = self.rng.random(n) if self.multi_action_exploration == "per_action" else np.full(n, self.rng.random())
        for d in range(n):
            if draws[d] < self.epsilon:
                block[d] = self.rng.integers(a)
            elif draws[d] < self.epsilon + self.epsilon_boltzmann:
                block[d] = np.argmax(q[d] + self.tau_epsilon_boltzmann * self.rng.standard_normal(a))
        return block, bool(np.array_equal(block, greedy))

    def act(self, obs: Any, test: bool = False) -> Any:
        return self.act_with_info(obs, test)[0]

    def set_exploration(self, epsilon: float, epsilon_boltzmann: float, tau_epsilon_boltzmann: float | None = None) -> None:
        self.epsilon, self.epsilon_boltzmann = float(epsilon), float(epsilon_boltzmann)
        if tau_epsilon_boltzmann is not None:
            self.tau_epsilon_boltzmann = float(tau_epsilon_boltzmann)

    def load_weights(self, weights: Weights) -> None:
        """Load network tensors; an ``exploration`` entry (3 floats) updates the exploration rates."""
        tensors = {k: torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v
                   for k, v in weights.items()}
        explo = tensors.pop(EXPLORATION_KEY, None)
        if self._fast is not None:
            self._fast.invalidate()
        self.net.load_state_dict(tensors)  # copies into the existing parameters (a captured graph reads them)
        self._refresh_numpy()
        if self._fast is not None:
            self._fast.refresh()
        if explo is not None:
            e = explo.float().reshape(-1).tolist()
            if len(e) == 3:
                self.set_exploration(*e)

    def get_weights(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}
        out[EXPLORATION_KEY] = torch.tensor([self.epsilon, self.epsilon_boltzmann, self.tau_epsilon_boltzmann])
        return out
