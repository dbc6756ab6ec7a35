"""The IQN learner step's fast paths give the plain step's numbers: the optimizer's foreach
implementation, Munchausen's two target forwards run as one, the loss compiled as one function
(torch.compile: one graph, no recompile over updates and held-out evaluations), the autocast dtype."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.agent import optimizer_kwargs
from rulka.agents.iqn.replay import ReplayBatch

SPEC = IQNNetworkSpec(float_dim=5, n_actions=4, float_hidden_dim=16, dense_hidden_dimension=32, embedding_dimension=8)
IMAGE_SPEC = IQNNetworkSpec(float_dim=5, n_actions=4, image_height=36, image_width=48, float_hidden_dim=16,
                            dense_hidden_dimension=32, embedding_dimension=8)


def batch(seed, b=8, spec=SPEC):
    r = np.random.default_rng(seed)
    img = (lambda: r.integers(0, 255, (b, spec.image_height, spec.image_width), dtype=np.uint8)) \
        if spec.image_height else (lambda: None)
    return ReplayBatch(state_img=img(), state_float=r.normal(size=(b, 5)).astype(np.float32),
                       action=r.integers(0, 4, b), reward=r.normal(size=b).astype(np.float32),
                       next_img=img(), next_float=r.normal(size=(b, 5)).astype(np.float32),
                       gamma=np.full(b, 0.9, np.float32), weights=np.ones(b, np.float32), slots=np.arange(b))


def train_pair(a, b, steps=3, spec=SPEC, between=None):
    for i in range(steps):
        for agent in (a, b):
            torch.manual_seed(i)
            agent.train(batch(i, spec=spec))
            if between is not None:
                between(agent, i)


def params_close(a, b, **tol):
    return all(torch.allclose(x, y, **tol) for x, y in zip(a.online.parameters(), b.online.parameters()))


def test_foreach_optimizer_steps_as_the_per_tensor_loop():
    common = dict(iqn_n=4, iqn_k=4, mini_race_actions=None, lr_schedule=[[0, 1e-3]])
    for opt in ("radam", "adam"):
        loop = IQNAgent(SPEC, IQNHyper(**common, optimizer=opt, optimizer_impl="for_loop"), seed=0)
        auto = IQNAgent(SPEC, IQNHyper(**common, optimizer=opt), seed=0)
        assert auto.optimizer.defaults["foreach"] is True and loop.optimizer.defaults["foreach"] is False
        train_pair(loop, auto)
        assert params_close(loop, auto, rtol=1e-5, atol=1e-7)
        assert not params_close(loop, IQNAgent(SPEC, IQNHyper(**common), seed=0))  # it trained
    # fused where torch has it on CUDA (Adam); none for RAdam, none on CPU
    assert optimizer_kwargs(torch.optim.Adam, "auto", torch.device("cuda")) == {"fused": True, "foreach": False}
    assert optimizer_kwargs(torch.optim.RAdam, "auto", torch.device("cuda")) == {"foreach": True}
    with pytest.raises(ValueError, match="no fused"):
        IQNAgent(SPEC, IQNHyper(**common, optimizer="adam", optimizer_impl="fused"), seed=0)
    # a checkpoint of a per-tensor-loop run resumes with this agent's foreach (its groups carry the flag)
    resumed = IQNAgent(SPEC, IQNHyper(**common), seed=1)
    resumed.load_state_dict(loop.state_dict())
    assert all(g["foreach"] is True for g in resumed.optimizer.param_groups)


def test_munchausen_target_forwards_fused_into_one_give_the_same_update():
    common = dict(iqn_n=4, iqn_k=4, mini_race_actions=None, use_munchausen=True, lr_schedule=[[0, 1e-3]])
    two = IQNAgent(IMAGE_SPEC, IQNHyper(**common, fuse_forwards=False), seed=0)
    one = IQNAgent(IMAGE_SPEC, IQNHyper(**common, fuse_forwards=True), seed=0)
    assert not IQNAgent(IMAGE_SPEC, IQNHyper(**common), seed=0)._fuse_forwards  # auto: on CUDA only
    torch.manual_seed(5)
    t_two = two._loss(batch(9, spec=IMAGE_SPEC))[2]
    torch.manual_seed(5)
    t_one = one._loss(batch(9, spec=IMAGE_SPEC))[2]
    torch.testing.assert_close(t_one, t_two, rtol=1e-5, atol=1e-6)
    train_pair(two, one, spec=IMAGE_SPEC)
    assert params_close(two, one, rtol=1e-4, atol=1e-6)


def test_compiled_loss_is_one_graph_without_recompiles_and_gives_the_eager_update():
    import torch._dynamo
    from torch._dynamo.utils import counters

    hp = IQNHyper(iqn_n=4, iqn_k=4, mini_race_actions=None, use_ddqn=True, lr_schedule=[[0, 1e-3]])
    eager, compiled = IQNAgent(SPEC, hp, seed=0), IQNAgent(SPEC, hp, seed=0)
    torch._dynamo.reset()
    counters.clear()
    compiled.compile_loss(backend="eager")  # dynamo's capture without inductor's C++ build (CPU CI)

    def evaluate(agent, i):  # a held-out loss between updates: no gradients, the eager function
        agent.evaluate(batch(100 + i))

    train_pair(eager, compiled, steps=3, between=evaluate)
    assert params_close(eager, compiled, rtol=1e-5, atol=1e-7)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["recompiles"]


def test_amp_dtype_reaches_the_autocast_and_the_scaler():
    from rulka.agents.iqn.settings import hyper_from_config
    from rulka.config import config_from_dict

    hp = hyper_from_config(config_from_dict({"nn": {"training": {"amp_dtype": "bfloat16",
                                                                 "compile_mode": "reduce-overhead"}}}))
    assert (hp.amp_dtype, hp.compile_mode) == ("bfloat16", "reduce-overhead")
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=4, iqn_k=4, mini_race_actions=None, amp_dtype="bfloat16"), seed=0)
    assert not agent.scaler.is_enabled()  # bfloat16 needs no loss scaling (nor its per-step read-back)
    agent.amp = True  # CUDA only in a run; CPU autocast takes bfloat16 too
    q = agent._loss(batch(0))[3]
    assert q.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="amp_dtype"):
        IQNHyper(amp_dtype="float8")
