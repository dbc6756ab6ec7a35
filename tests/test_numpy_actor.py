"""The IQN actor's numpy path (float-only networks on CPU) computes what the torch network
computes: same mean Q for the greedy midpoint taus and for sampled stratified mirrored taus,
over the network variants a config can build; it follows new weights; image networks keep torch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from rulka.agents.iqn import IQNActor, IQNNetworkSpec
from rulka.agents.iqn.network import mean_q
from rulka.nn.numpy_forward import UnsupportedModule, compile_sequential, run_steps

BASE = dict(float_dim=5, n_actions=3, float_hidden_dim=24, dense_hidden_dimension=32, embedding_dimension=16)
VARIANTS = {
    "plain": {},
    "layer_norm": {"use_layer_norm": True},
    "deep_head": {"head_layers": 2, "value_hidden_dim": 8, "value_layers": 1},
    "noisy": {"use_noisy_linear": True},
    "normalised": {"float_mean": [1.0, -2.0, 0.5, 0.0, 3.0], "float_std": [2.0, 0.5, 1.0, 4.0, 0.25]},
}


def randomised_actor(spec: dict, k: int = 8, seed: int = 0, **kw) -> IQNActor:
    actor = IQNActor(spec, iqn_k=k, seed=seed, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # non-zero biases and LayerNorm affines, so every term is exercised
        for name, p in actor.net.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if "weight" in name else 0.5))
    actor.load_weights({k_: v for k_, v in actor.get_weights().items()})  # through the public path
    return actor


def torch_q(actor: IQNActor, obs: np.ndarray, taus: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return mean_q(actor.net, None, torch.from_numpy(obs[None]), actor.iqn_k, taus)[0].numpy()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_q_values_match_the_torch_network(variant):
    actor = randomised_actor({**BASE, **VARIANTS[variant]})
    assert actor._numpy is not None
    rng = np.random.default_rng(1)
    for _ in range(5):
        obs = rng.normal(size=5).astype(np.float32) * 3
        q = actor.q_values(obs, test=True)
        assert q.dtype == np.float32 and q.shape == (3,)
        np.testing.assert_allclose(q, torch_q(actor, obs, actor._midpoints), rtol=1e-5, atol=1e-5)


def test_exploring_q_values_use_stratified_mirrored_taus():
    actor = randomised_actor(BASE, k=8, seed=3)
    twin = np.random.default_rng(3).spawn(1)[0]  # the actor's tau generator, replayed
    obs = np.linspace(-1, 1, 5).astype(np.float32)
    for _ in range(3):
        q = actor.q_values(obs)
        low = (np.arange(4, dtype=np.float32) + twin.random(4, dtype=np.float32)) / 8
        taus = torch.from_numpy(np.concatenate([low, 1.0 - low]))
        np.testing.assert_allclose(q, torch_q(actor, obs, taus), rtol=1e-5, atol=1e-5)
    assert not np.allclose(actor.q_values(obs), actor.q_values(obs))  # fresh taus each call


def test_new_weights_reach_the_numpy_path():
    actor = randomised_actor(BASE, seed=0)
    other = randomised_actor(BASE, seed=1)
    obs = np.ones(5, np.float32)
    before = actor.q_values(obs, test=True)
    actor.load_weights(other.get_weights())
    after = actor.q_values(obs, test=True)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, other.q_values(obs, test=True), rtol=1e-6)


def test_mini_race_slot_is_zeroed_on_the_numpy_path():
    actor = randomised_actor(BASE, mini_race_actions=10)
    obs = np.full(5, 2.0, np.float32)
    zeroed = obs.copy()
    zeroed[0] = 0.0
    np.testing.assert_allclose(actor.q_values(obs, test=True), torch_q(actor, zeroed, actor._midpoints),
                               rtol=1e-5, atol=1e-5)


def test_image_networks_keep_torch():
    spec = dataclasses.asdict(IQNNetworkSpec(float_dim=2, n_actions=3, image_height=60, image_width=80,
                                             float_hidden_dim=8, dense_hidden_dimension=16, embedding_dimension=8))
    actor = IQNActor(spec, iqn_k=4, seed=0)
    assert actor._numpy is None
    action = actor.act({"img": np.zeros((60, 80), np.uint8), "float": np.zeros(2, np.float32)}, test=True)
    assert 0 <= action < 3


def test_unsupported_modules_are_refused():
    with pytest.raises(UnsupportedModule, match="Conv2d"):
        compile_sequential(nn.Sequential(nn.Linear(2, 2), nn.Conv2d(1, 1, 3)))
    with pytest.raises(UnsupportedModule):
        compile_sequential([nn.LeakyReLU(2.0)])


def test_layer_norm_and_relu_steps_match_torch():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(6, 10), nn.LayerNorm(10), nn.ReLU(), nn.Linear(10, 4), nn.LeakyReLU(0.2))
    with torch.no_grad():
        seq[1].weight.uniform_(0.5, 1.5)
        seq[1].bias.uniform_(-1, 1)
    x = torch.randn(7, 6)
    with torch.no_grad():
        expected = seq(x).numpy()
    np.testing.assert_allclose(run_steps(compile_sequential(seq), x.numpy()), expected, rtol=1e-5, atol=1e-5)


def test_the_worker_limits_numpy_blas_threads_with_torch_threads():
    import os
    import subprocess
    import sys

    code = ("from rulka.worker.cli import limit_inference_threads; import torch, numpy; "
            "from threadpoolctl import threadpool_info; limit_inference_threads(1); "
            "print(torch.get_num_threads(), sorted({i['num_threads'] for i in threadpool_info() "
            "if i['user_api'] == 'blas'}))")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["OPENBLAS_NUM_THREADS"] = "2"  # as if the machine had more cores: the limit must win
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(None, 1) == ["1", "[1]\n"]


NOISY = {**BASE, "use_noisy_linear": True}


def test_noisy_actors_explore_with_their_own_noise_and_evaluate_noise_free():
    """NoisyNet: two workers' actors (one agent, epsilon 0) act differently on the same
    observations; greedy (evaluation, best policy) both act with the mean weights, identically."""
    from rulka.agents.iqn import IQNAgent, IQNHyper

    agent = IQNAgent(IQNNetworkSpec(**NOISY), IQNHyper(iqn_n=8, iqn_k=8, mini_race_actions=None,
                                                       epsilon_schedule=[[0, 0.0]],
                                                       epsilon_boltzmann_schedule=[[0, 0.0]]), seed=0)
    a, b = agent.get_actor(), agent.get_actor()
    assert a.epsilon == b.epsilon == 0.0 and a.noisy and a.uses_numpy
    obs = np.random.default_rng(0).normal(size=(300, 5)).astype(np.float32) * 3
    explore_a, explore_b = [a.act(o) for o in obs], [b.act(o) for o in obs]
    assert explore_a != explore_b
    assert [a.act(o, test=True) for o in obs] == [b.act(o, test=True) for o in obs]
    # the greedy action is the mean weights' (a network without noise), whatever the noise sample
    mean_only = IQNActor(NOISY, iqn_k=8, seed=5)
    mean_only.load_weights(a.get_weights())
    assert [a.act(o, test=True) for o in obs] == [mean_only.act(o, test=True) for o in obs]


@pytest.mark.parametrize("numpy_inference", [True, False])
def test_noise_is_redrawn_per_episode_or_every_n_actions(numpy_inference):
    per_episode = randomised_actor(NOISY, seed=1, numpy_inference=numpy_inference)
    assert per_episode.uses_numpy is numpy_inference
    obs = np.ones(5, np.float32)
    draws = per_episode.noise_draws
    for _ in range(10):
        per_episode.act(obs)
    assert per_episode.noise_draws == draws  # one sample for the whole episode
    q_before = noisy_q(per_episode, obs)
    per_episode.reset()
    assert per_episode.noise_draws == draws + 1 and not np.allclose(q_before, noisy_q(per_episode, obs))
    every3 = randomised_actor(NOISY, seed=1, numpy_inference=numpy_inference, noisy_resample_every_actions=3)
    draws = every3.noise_draws
    for _ in range(7):  # redrawn before actions 4 and 7
        every3.act(obs)
    assert every3.noise_draws == draws + 2
    for _ in range(5):
        every3.act(obs, test=True)  # greedy actions neither use nor redraw noise
    assert every3.noise_draws == draws + 2


def noisy_q(actor: IQNActor, obs: np.ndarray) -> np.ndarray:
    """The actor's exploring mean Q at the midpoint taus (fixed taus: only the noise varies)."""
    if actor._numpy is not None:
        return actor._numpy(obs, None, noise=True)
    for m in actor._noisy:
        m.act_with_noise = True
    return torch_q(actor, obs, actor._midpoints)


def test_the_numpy_noise_sample_is_the_torch_one():
    actor = randomised_actor(NOISY, seed=2)
    actor.reset()
    obs = np.linspace(-2, 2, 5).astype(np.float32)
    q_np = actor._numpy(obs, None, noise=True)
    for m in actor._noisy:
        m.act_with_noise = True
    np.testing.assert_allclose(q_np, torch_q(actor, obs, actor._midpoints), rtol=1e-5, atol=1e-5)
    for m in actor._noisy:
        m.act_with_noise = False
    assert not np.allclose(q_np, torch_q(actor, obs, actor._midpoints))  # the mean weights differ


def test_exploration_uses_one_uniform_draw_as_linesight():
    """r < epsilon: uniform action; r < epsilon + epsilon_boltzmann: argmax of Q + tau N(0, 1);
    else greedy. Replayed draw by draw from a twin of the actor's generator."""
    actor = randomised_actor(BASE, seed=4, epsilon=0.3, epsilon_boltzmann=0.4, tau_epsilon_boltzmann=1e-9)
    twin = np.random.default_rng(4)
    obs = np.ones(5, np.float32)
    kinds = {"random": 0, "boltzmann": 0, "greedy": 0}
    for _ in range(300):
        action, info = actor.act_with_info(obs)
        r = twin.random()
        if r < 0.3:
            expected, kind = int(twin.integers(3)), "random"
        elif r < 0.7:
            twin.standard_normal(3)  # a tiny tau: the Boltzmann pick is the greedy action
            expected, kind = int(np.argmax(info["q_values"])), "boltzmann"
        else:
            expected, kind = int(np.argmax(info["q_values"])), "greedy"
        kinds[kind] += 1
        assert action == expected
    assert all(v > 50 for v in kinds.values())
