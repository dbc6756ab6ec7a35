"""The policy learners' math against hand-computed values: GAE, the clipped surrogate, the value
loss, GRPO's group advantages, the DPO loss, and the rollout builder's reward shaping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rulka.agents.policy.losses import (
    categorical_kl,
    discounted_returns,
    dpo_loss,
    gae,
    group_relative_advantages,
    grpo_clipped_loss,
    ppo_policy_loss,
    ppo_value_loss,
)
from rulka.agents.policy.rollout import build_rollout
from rulka.errors import BadInput
from rulka.segment import Segment


def test_gae_terminal_episode_by_hand():
    # delta2 = 3 - 1.5 = 1.5 (terminal: no bootstrap); delta1 = 2 + .9*1.5 - 1 = 2.35;
    # delta0 = 1 + .9*1 - .5 = 1.4; A1 = 2.35 + .72*1.5 = 3.43; A0 = 1.4 + .72*3.43 = 3.8696
    adv, ret = gae(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]), np.array([1.0, 1.5, 2.0]),
                   terminated=np.array([False, False, True]), dones=np.array([False, False, True]),
                   gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [3.8696, 3.43, 1.5], rtol=1e-6)
    np.testing.assert_allclose(ret, [4.3696, 4.43, 3.0], rtol=1e-6)


def test_gae_truncation_bootstraps_from_the_last_value():
    # truncated, not terminated: delta2 = 3 + .9*2 - 1.5 = 3.3; A1 = 2.35 + .72*3.3 = 4.726;
    # A0 = 1.4 + .72*4.726 = 4.80272
    adv, _ = gae(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]), np.array([1.0, 1.5, 2.0]),
                 terminated=np.array([False, False, False]), dones=np.array([False, False, True]),
                 gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [4.80272, 4.726, 3.3], rtol=1e-6)


def test_gae_stops_at_an_episode_boundary_inside_the_stretch():
    # step 0 ends an episode (done) without terminating: A0 = delta0 only
    adv, _ = gae(np.array([1.0, 1.0]), np.array([0.0, 0.0]), np.array([2.0, 0.0]),
                 terminated=np.array([False, True]), dones=np.array([True, True]), gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [1.0 + 0.5 * 2.0, 1.0])


def test_clipped_surrogate_by_hand():
    ratio = torch.tensor([1.5, 0.5, 1.1])
    new_logp = ratio.log().requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -2.0])
    loss, clipfrac, approx_kl = ppo_policy_loss(new_logp, torch.zeros(3), adv, clip_coef=0.2)
    # item 0: max(-1.5, -1.2) = -1.2 (clipped); item 1: max(-0.5, -0.8) = -0.5; item 2: 2.2
    assert float(loss.detach()) == pytest.approx((-1.2 - 0.5 + 2.2) / 3)
    assert float(clipfrac) == pytest.approx(2 / 3)
    expected_kl = np.mean([(r - 1) - math.log(r) for r in (1.5, 0.5, 1.1)])
    assert float(approx_kl) == pytest.approx(expected_kl, rel=1e-5)
    loss.backward()
    # the clipped item gets no gradient; the others d/dlogp (-A r) / 3 = -A r / 3
    np.testing.assert_allclose(new_logp.grad.numpy(), [0.0, -0.5 / 3, 2.2 / 3], rtol=1e-5)


def test_value_loss_plain_and_clipped_by_hand():
    new, old, ret = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 2.0])
    assert float(ppo_value_loss(new, old, ret, None)) == pytest.approx(0.5 * (1.0 + 0.0) / 2)
    # clipped values 0.5, 0.5 -> errors 2.25, 2.25 are larger than 1, 0: 0.5 * 2.25
    assert float(ppo_value_loss(new, old, ret, 0.5)) == pytest.approx(1.125)


def test_group_relative_advantages_by_hand():
    returns = np.array([1.0, 2.0, 3.0, 6.0])
    np.testing.assert_allclose(group_relative_advantages(returns, "mean").numpy(), [-2, -1, 0, 3])
    std = math.sqrt((4 + 1 + 0 + 9) / 4)
    np.testing.assert_allclose(group_relative_advantages(returns, "mean_std").numpy(),
                               [-2 / std, -1 / std, 0, 3 / std], rtol=1e-6)
    assert float(group_relative_advantages(returns, "mean_std").sum()) == pytest.approx(0.0, abs=1e-6)
    # a group whose returns are all equal carries no signal, and no NaN
    np.testing.assert_array_equal(group_relative_advantages(np.ones(4), "mean_std").numpy(), np.zeros(4))
    with pytest.raises(ValueError):
        group_relative_advantages(returns, "median")


def test_grpo_clipped_loss_averages_steps_within_each_trajectory_by_hand():
    # trajectory 0 (A = 1): ratios 1.5, 1.0; trajectory 1 (A = -1): ratios 0.5, 1.1, 1.0
    ratio = torch.tensor([1.5, 1.0, 0.5, 1.1, 1.0])
    new_logp = ratio.log().requires_grad_(True)
    owner, lengths = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([2, 3])
    loss, clipfrac, _ = grpo_clipped_loss(new_logp, torch.zeros(5), torch.tensor([1.0, -1.0]), owner, lengths, 0.2)
    # traj 0: max(-1.5, -1.2) = -1.2, max(-1, -1) = -1 -> mean -1.1
    # traj 1: max(0.5, 0.8) = 0.8 (clipped), max(1.1, 1.1) = 1.1, 1.0 -> mean 2.9 / 3
    assert float(loss.detach()) == pytest.approx((-1.1 + 2.9 / 3) / 2)
    assert float(clipfrac) == pytest.approx(2 / 5)
    loss.backward()
    # d/dlogp of -A r / (T_i K): step 0 and 2 clipped (0); step 1: -1 / 4; steps 3, 4: r / 6
    np.testing.assert_allclose(new_logp.grad.numpy(), [0.0, -0.25, 0.0, 1.1 / 6, 1.0 / 6], rtol=1e-5)
    # the per-step mean: doubling a trajectory's steps (same ratios) leaves the loss unchanged
    twice, _, _ = grpo_clipped_loss(torch.cat([new_logp, new_logp[:2]]).detach(), torch.zeros(7),
                                    torch.tensor([1.0, -1.0]), torch.tensor([0, 0, 1, 1, 1, 0, 0]),
                                    torch.tensor([4, 3]), 0.2)
    assert float(twice) == pytest.approx(float(loss.detach()))


def test_categorical_kl_is_exact_and_has_a_gradient():
    p, q = torch.tensor([[0.5, 0.25, 0.25]]), torch.tensor([[0.25, 0.25, 0.5]])
    logits = p.log().requires_grad_(True)
    logp = torch.log_softmax(logits, -1)
    kl = categorical_kl(logp, q.log())
    # 0.5 ln 2 + 0 + 0.25 ln 0.5 = 0.25 ln 2
    assert float(kl.detach()) == pytest.approx(0.25 * math.log(2), rel=1e-6)
    kl.sum().backward()
    # d KL / d logit_j = p_j (log p_j - log q_j - KL)
    d = p[0] * (p[0].log() - q[0].log() - 0.25 * math.log(2))
    np.testing.assert_allclose(logits.grad[0].numpy(), d.numpy(), rtol=1e-5, atol=1e-7)
    assert float(categorical_kl(q.log(), q.log())) == 0.0


def test_ppo_minibatches_have_no_tiny_remainder_and_normalise_within():
    from rulka.agents.policy.ppo import minibatch_sizes, normalized

    assert minibatch_sizes(10, 4) == [3, 3, 2, 2]
    assert minibatch_sizes(9, 4) == [3, 2, 2, 2]
    assert minibatch_sizes(8, 4) == [2, 2, 2, 2]
    assert minibatch_sizes(3, 4) == [1, 1, 1]
    assert minibatch_sizes(1, 1) == [1]
    # [1, 3]: mean 2, sample std sqrt(2): [-1/sqrt 2, 1/sqrt 2]
    np.testing.assert_allclose(normalized(torch.tensor([1.0, 3.0])).numpy(), [-2 ** -0.5, 2 ** -0.5], rtol=1e-6)
    assert normalized(torch.tensor([5.0])).tolist() == [5.0]


def test_discounted_returns_by_hand():
    # G2 = 3; G1 = 2 + .5*3 = 3.5; G0 = 1 + .5*3.5 = 2.75
    np.testing.assert_allclose(discounted_returns(np.array([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0])
    np.testing.assert_allclose(discounted_returns(np.array([1.0, 1.0]), 1.0), [2.0, 1.0])


def test_dpo_loss_by_hand():
    t = torch.tensor
    loss, margin = dpo_loss(t(-10.0), t(-12.0), t(-8.0), t(-7.0), beta=0.5)
    # margin = 0.5 * ((-10 + 12) - (-8 + 7)) = 1.5; loss = log(1 + exp(-1.5))
    assert float(margin) == pytest.approx(1.5)
    assert float(loss) == pytest.approx(math.log1p(math.exp(-1.5)))
    # the same policy as the reference: log 2
    assert float(dpo_loss(t(-3.0), t(-3.0), t(-5.0), t(-5.0), beta=0.1)[0]) == pytest.approx(math.log(2))


def _segment(rewards, potential, terminated, index=0, first=0, done=False, obs0=0.0):
    t = len(rewards)
    arrays = {"obs/float": (obs0 + np.arange(t + 1, dtype=np.float32))[:, None],
              "obs/potential": np.asarray(potential, np.float32), "action": np.zeros(t, np.int64),
              "reward": np.asarray(rewards, np.float32), "terminated": np.asarray(terminated, bool),
              "truncated": np.zeros(t, bool), "extra/logprob": np.full(t, -0.5, np.float32),
              "extra/value": np.zeros(t, np.float32)}
    return Segment(run_id="r", worker_id="w", episode_id=0, seq=index, index_in_episode=index, first_step=first,
                   policy_version=3 + index, arrays=arrays, episode_done=done)


def test_rollout_builder_joins_segments_and_shapes_rewards_with_gamma():
    # potentials 0, 2 | 2, 5: r0 = 1 + .9*2 - 0 = 2.8; r1 = 1 + 0 (terminal) - 2 = -1
    first = _segment([1.0], [0.0, 2.0], [False])
    second = _segment([1.0], [2.0, 5.0], [True], index=1, first=1, done=True, obs0=1.0)
    r = build_rollout([first, second], gamma=0.9, min_steps=2)
    np.testing.assert_allclose(r.reward, [2.8, -1.0], rtol=1e-6)
    np.testing.assert_array_equal(r.flt[:, 0], [0.0, 1.0, 2.0])  # shared observation kept once
    assert r.policy_version == 3 and r.episode_done and r.score == pytest.approx(1.8)
    assert build_rollout([first], gamma=0.9, min_steps=2) is None  # shorter than the minimum


def test_rollout_builder_refuses_what_a_policy_learner_cannot_use():
    seg = _segment([1.0, 1.0], [0.0, 0.0, 0.0], [False, False])
    seg.arrays["action"] = np.array([0, 7])
    with pytest.raises(BadInput, match="out of range"):
        build_rollout([seg], 0.9, n_actions=2)
    seg.arrays["action"] = np.array([[0.1], [0.2]], np.float32)
    with pytest.raises(BadInput, match="discrete"):
        build_rollout([seg], 0.9)
