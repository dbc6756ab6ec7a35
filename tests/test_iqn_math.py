"""IQN math against hand-computed values: taus, quantile Huber loss, dueling, embedding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rulka.agents.iqn.loss import TargetSelfLossScale, greedy_next_value, quantile_huber_loss
from rulka.agents.iqn.network import IQNNetwork, IQNNetworkSpec, float_normalisation, stratified_mirrored_taus
from rulka.nn import DuelingHead, cosine_embedding


def test_taus_are_stratified_and_mirrored_quantile_major():
    g = torch.Generator().manual_seed(0)
    b, n = 3, 8
    taus = stratified_mirrored_taus(b, n, generator=g)
    assert taus.shape == (n * b,)
    t = taus.reshape(n, b)  # row j = quantile j of every item
    for j in range(n // 2):
        assert torch.all(t[j] >= j / n) and torch.all(t[j] < (j + 1) / n)
        assert torch.allclose(t[j + n // 2], 1 - t[j])
    # every item has n/2 taus below 0.5 and their mirrors above
    assert torch.all((t < 0.5).sum(0) == n // 2)


def test_taus_need_even_count():
    with pytest.raises(ValueError):
        stratified_mirrored_taus(2, 5)


def test_quantile_huber_loss_tiny_case_by_hand():
    kappa = 1.0
    target = torch.tensor([[2.0, 0.0]])  # two target samples
    online = torch.tensor([[0.5, 1.0]])
    taus = torch.tensor([[0.25, 0.75]])
    # pairs (target j, online i): delta = t_j - o_i
    # j=0: d=1.5 (i=0) -> huber 1.5-0.5=1.0, w=tau0=0.25 -> 0.25 ; d=1.0 (i=1) -> 0.5, w=0.75 -> 0.375
    # j=1: d=-0.5 (i=0) -> 0.125, w=1-0.25=0.75 -> 0.09375 ; d=-1.0 (i=1) -> 0.5, w=0.25 -> 0.125
    # sum over i, mean over j: ((0.25+0.375) + (0.09375+0.125)) / 2 = 0.421875
    loss = quantile_huber_loss(target, online, taus, kappa)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(0.421875)


def test_quantile_huber_loss_small_kappa_is_pinball():
    target = torch.tensor([[3.0]])
    online = torch.tensor([[1.0]])
    taus = torch.tensor([[0.9]])
    # delta = 2 >= kappa: (|d| - kappa/2) * tau = (2 - 0.0025) * 0.9
    assert quantile_huber_loss(target, online, taus, 5e-3).item() == pytest.approx((2 - 0.0025) * 0.9)


def test_dueling_combination():
    v = torch.tensor([[1.0], [0.0]])
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])
    q = DuelingHead.combine(v, a)
    assert torch.allclose(q, torch.tensor([[0.0, 1.0, 2.0], [-1.0, -1.0, 2.0]]))


def test_cosine_embedding_values():
    tau = torch.tensor([0.25])
    e = cosine_embedding(tau, 4)
    expected = [math.cos(math.pi * i * 0.25) for i in range(1, 5)]
    assert torch.allclose(e[0], torch.tensor(expected), atol=1e-6)


def test_network_shapes_image_and_float_only():
    spec = IQNNetworkSpec(float_dim=5, n_actions=3, image_height=48, image_width=64, float_hidden_dim=16,
                          dense_hidden_dimension=32, embedding_dimension=8)
    net = IQNNetwork(spec)
    img = torch.randint(0, 255, (2, 48, 64), dtype=torch.uint8)
    q = net(img, torch.zeros(2, 5), stratified_mirrored_taus(2, 4))
    assert q.shape == (8, 3)
    flat = IQNNetwork(IQNNetworkSpec(float_dim=4, n_actions=2, float_hidden_dim=8, dense_hidden_dimension=8,
                                     embedding_dimension=4))
    assert flat(None, torch.zeros(3, 4), stratified_mirrored_taus(3, 2)).shape == (6, 2)


@pytest.mark.parametrize("opts", [dict(use_impala_cnn=True, use_adaptive_maxpool=True, adaptive_maxpool_size=3),
                                  dict(use_spectral_norm=True), dict(use_layer_norm=True, use_noisy_linear=True)])
def test_network_options_build_and_run(opts):
    spec = IQNNetworkSpec(float_dim=3, n_actions=4, image_height=48, image_width=48, float_hidden_dim=8,
                          dense_hidden_dimension=16, embedding_dimension=8, **opts)
    net = IQNNetwork(spec)
    q = net(torch.zeros(2, 48, 48, dtype=torch.uint8), torch.zeros(2, 3), stratified_mirrored_taus(2, 2))
    assert q.shape == (4, 4) and torch.isfinite(q).all()


def test_float_normalisation_mini_race_slot():
    m, s = float_normalisation(3, 140)
    assert m == [70.0, 0.0, 0.0] and s == [70.0, 1.0, 1.0]
    assert np.allclose(float_normalisation(2, None)[1], [1.0, 1.0])
    # given (e.g. sample-derived: workers send 0 in the time slot) values never win for slot 0
    m, s = float_normalisation(3, 140, mean=[0.0, 5.0, 6.0], std=[0.01, 2.0, 3.0])
    assert m == [70.0, 5.0, 6.0] and s == [70.0, 2.0, 3.0]


def test_greedy_next_value_per_quantile_max_and_paper_argmax_by_hand():
    # one item, two actions; quantile 0: [0, 1], quantile 1: [3, 1]; quantile means [1.5, 1]
    q_next = torch.tensor([[[0.0, 1.0]], [[3.0, 1.0]]])
    assert greedy_next_value(q_next, "quantile_max")[:, 0].tolist() == [1.0, 3.0]  # mixes actions
    assert greedy_next_value(q_next, "mean_argmax")[:, 0].tolist() == [0.0, 3.0]  # action 0's quantiles
    with pytest.raises(ValueError):
        greedy_next_value(q_next, "median")


def test_target_self_loss_scale_by_hand():
    # item 0: target quantiles [0, 2] at taus [.25, .75]; item 1: [1, 1] (no spread). kappa = 1.
    # item 0 self-loss: pairs (0 vs 2): delta -2, huber 1.5, weight 1 - .75 = .25 -> .375;
    # (2 vs 0): delta 2, huber 1.5, weight .25 -> .375; the others 0; sum over i, mean over j: .375
    target = torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    taus = torch.tensor([[0.25, 0.75], [0.25, 0.75]])
    scale = TargetSelfLossScale(4.0)
    factors = scale(target, taus, 1.0)
    typical = 0.99 * 0.01 + 0.01 * (0.375 + 0.0) / 2
    clamped = [0.375, typical / 4]  # item 1 is lifted to the clamp
    typical_clamped = 0.99 * 0.01 + 0.01 * sum(clamped) / 2
    assert scale.typical_self_loss == pytest.approx(typical)
    assert scale.typical_clamped_self_loss == pytest.approx(typical_clamped)
    np.testing.assert_allclose(factors.numpy(), [typical_clamped / c for c in clamped], rtol=1e-5)
    other = TargetSelfLossScale(4.0)
    other.load_state_dict(scale.state_dict())
    np.testing.assert_allclose(other(target, taus, 1.0).numpy(), scale(target, taus, 1.0).numpy(), rtol=1e-6)


def test_munchausen_bonus_clips_the_scaled_log_policy():
    """alpha * clamp(tau * log pi(a|s), lo, 0) with pi = softmax(q / tau), by hand:
    q = [0.015, 0], tau = 0.03: logits [0.5, 0]; log pi(1) = -log(1 + e^0.5) = -0.974077;
    tau * log pi = -0.0292223, above lo: bonus 0.9 * -0.0292223 = -0.0263001.
    q = [1, 0]: tau * log pi(1) = -1.0 - 0.03 * log(1 + e^-33.3) = -1.0000, clipped at lo = -0.5:
    bonus 0.9 * -0.5 = -0.45 (the old tau * clamp(log pi) gave 0.9 * 0.03 * -1 = -0.027)."""
    from rulka.agents.iqn.loss import munchausen_bonus

    q = torch.tensor([[0.015, 0.0], [1.0, 0.0], [1.0, 0.0]])
    action = torch.tensor([1, 1, 0])
    bonus = munchausen_bonus(q, action, alpha=0.9, tau=0.03, lo=-0.5)
    greedy = 0.9 * 0.03 * -math.log1p(math.exp(-1 / 0.03))  # pi(0) ~ 1: log pi ~ -e^-33
    assert bonus.tolist() == pytest.approx([-0.0263001, -0.45, greedy], abs=1e-6)


def test_munchausen_next_value_is_the_soft_value():
    """sum_a pi(a) (q_a - tau log pi(a)) for q = [1, 0], tau = 0.5: pi = softmax([2, 0]) =
    [0.880797, 0.119203]; log pi = [-0.126928, -2.126928]; value = 0.880797 * (1 + 0.063464)
    + 0.119203 * (0 + 1.063464) = 0.936695 + 0.126768 = 1.063464 (= tau * logsumexp(q / tau))."""
    from rulka.agents.iqn.loss import munchausen_next_value

    q_next = torch.tensor([[[1.0, 0.0]]])  # (n=1, B=1, A=2)
    assert munchausen_next_value(q_next, 0.5).item() == pytest.approx(1.063464, abs=1e-5)


def test_munchausen_with_double_dqn_is_refused():
    from rulka.config import config_from_dict
    from rulka.errors import ConfigError

    with pytest.raises(ConfigError, match="`nn.training.use_ddqn` cannot be combined with `btr.use_munchausen`"):
        config_from_dict({"btr": {"use_munchausen": True}, "nn": {"training": {"use_ddqn": True}}})
