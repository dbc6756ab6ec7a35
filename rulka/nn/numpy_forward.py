"""Inference of small float-only MLPs in numpy, for actors that act one observation at a time.

At batch 1 a small MLP spends most of its time in torch's per-op overhead (dispatch, tensor
allocation, autograd/inference-mode bookkeeping: ~3-10 us per op), not in arithmetic. A worker
driving a fast float-only env (CartPole and other Gymnasium envs) is then limited by its actor:
an IQN actor on the CartPole network averages 32 quantiles through 7 Linear layers per step.
The same arithmetic in numpy costs a few microseconds per op. ``compile_sequential`` turns an
``nn.Sequential`` of the layers rulka's MLPs are made of into a list of numpy steps; anything
else raises ``UnsupportedModule`` so the caller keeps its torch path.

The weights are copied at compile time: recompile after loading new weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from rulka.nn.blocks import NoisyLinear


class UnsupportedModule(TypeError):
    """A module this numpy path does not implement (the caller falls back to torch)."""


def to_f32(t: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy of a tensor (detached, on CPU)."""
    return t.detach().to("cpu", torch.float32).numpy().copy()


def compile_sequential(modules: Iterable[nn.Module], noise: bool = False) -> list[tuple[Any, ...]]:
    """Numpy steps for Linear / NoisyLinear / LeakyReLU / ReLU / LayerNorm modules, in order. A
    NoisyLinear gives its mean weights, or with ``noise`` its current noise sample (recompile
    after each ``reset_noise``)."""
    steps: list[tuple[Any, ...]] = []
    for m in modules:
        if isinstance(m, NoisyLinear):
            w, b = m.sampled_weights() if noise else (m.weight_mu, m.bias_mu)
            steps.append(("linear", np.ascontiguousarray(to_f32(w).T), to_f32(b)))
        elif isinstance(m, nn.Linear):
            bias = to_f32(m.bias) if m.bias is not None else np.zeros(m.out_features, np.float32)
            steps.append(("linear", np.ascontiguousarray(to_f32(m.weight).T), bias))
        elif isinstance(m, nn.LeakyReLU):
            if not 0.0 <= m.negative_slope <= 1.0:
                raise UnsupportedModule("LeakyReLU slope outside [0, 1]")
            steps.append(("leaky_relu", np.float32(m.negative_slope)))
        elif isinstance(m, nn.ReLU):
            steps.append(("leaky_relu", np.float32(0.0)))
        elif isinstance(m, nn.LayerNorm):
            if len(m.normalized_shape) != 1:
                raise UnsupportedModule("LayerNorm over more than the last dimension")
            w = to_f32(m.weight) if m.weight is not None else None
            b = to_f32(m.bias) if m.bias is not None else None
            steps.append(("layer_norm", np.float32(m.eps), w, b))
        elif isinstance(m, nn.Sequential):
            steps.extend(compile_sequential(m, noise))
        else:
            raise UnsupportedModule(f"no numpy path for {type(m).__name__}")
    return steps


def run_steps(steps: list[tuple[Any, ...]], x: np.ndarray) -> np.ndarray:
    """Apply compiled steps to a float32 array ``(B, in)``; returns ``(B, out)``."""
    for step in steps:
        kind = step[0]
        if kind == "linear":
            x = x @ step[1]
            x += step[2]
        elif kind == "leaky_relu":
            x = np.maximum(x, x * step[1])
        else:  # layer_norm: biased variance, as torch
            _, eps, w, b = step
            mu = x.mean(axis=-1, keepdims=True)
            xc = x - mu
            x = xc / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
            if w is not None:
                x *= w
            if b is not None:
                x += b
    return x
