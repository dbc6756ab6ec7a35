"""IQNAgent and IQNActor: one update moves the online net toward the target, soft target
update formula, exploration rules, weights and checkpoint round trips, config factories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rulka.agents.iqn import IQNActor, IQNAgent, IQNHyper, IQNNetworkSpec
from rulka.agents.iqn.replay import ReplayBatch

SPEC = IQNNetworkSpec(float_dim=3, n_actions=4, float_hidden_dim=16, dense_hidden_dimension=32,
                      embedding_dimension=8)


def batch(b=16, reward=1.0, gamma=0.0):
    rng = np.random.default_rng(0)
    return ReplayBatch(state_img=None, state_float=rng.normal(size=(b, 3)).astype(np.float32),
                       action=rng.integers(0, 4, b), reward=np.full(b, reward, np.float32), next_img=None,
                       next_float=rng.normal(size=(b, 3)).astype(np.float32), gamma=np.full(b, gamma, np.float32),
                       weights=np.ones(b, np.float32), slots=np.arange(b))


def test_training_fits_terminal_rewards():
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=8, iqn_k=8, iqn_kappa=1.0, lr_schedule=[[0, 1e-2]], mini_race_actions=None),
                     seed=0)
    torch.set_num_threads(1)
    b = batch(reward=2.0)
    first = agent.train(b)["losses/td_loss"]
    for _ in range(100):
        metrics = agent.train(b)
    assert metrics["losses/td_loss"] < 0.2 * first
    q = agent.online(None, torch.from_numpy(b.state_float), torch.full((16 * 8,), 0.5))
    taken = q.reshape(8, 16, 4)[:, torch.arange(16), torch.from_numpy(b.action)]
    assert taken.mean().item() == pytest.approx(2.0, abs=0.3)
    assert set(metrics) >= {"losses/td_loss", "losses/grad_norm", "charts/learning_rate", "charts/q_mean",
                            "charts/epsilon", "charts/epsilon_boltzmann"}
    assert metrics["charts/epsilon"] == pytest.approx(agent.exploration()[0])


def test_soft_target_update_formula():
    hp = IQNHyper(iqn_n=2, iqn_k=2, soft_update_tau=0.25, number_memories_trained_on_between_target_network_updates=16,
                  mini_race_actions=None)
    agent = IQNAgent(SPEC, hp, seed=0)
    with torch.no_grad():
        for p in agent.online.parameters():
            p.fill_(1.0)
        for p in agent.target.parameters():
            p.fill_(0.0)
    agent.soft_update_target()
    assert all(torch.allclose(p, torch.full_like(p, 0.25)) for p in agent.target.parameters())
    # 16 memories between updates: a batch of 16 triggers exactly one update
    before = [p.clone() for p in agent.target.parameters()]
    agent.train(batch(16))
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.target.parameters()))


def test_test_batch_gives_test_loss_and_td_errors_are_reported():
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=2, iqn_k=2, mini_race_actions=None), seed=0)
    b = batch()
    b.test_batch = batch(8)
    seen = []
    b.report_td_errors = seen.append
    metrics = agent.train(b)
    assert "losses/test_loss" in metrics and metrics["losses/test_loss"] >= 0
    assert seen and seen[0].shape == (16,)


def test_actor_greedy_when_testing_and_random_with_epsilon_one():
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=2, iqn_k=4, epsilon_schedule=[[0, 1.0]], mini_race_actions=None), seed=0)
    actor = agent.get_actor()
    obs = np.array([0.1, -0.2, 0.3], np.float32)
    for _ in range(20):  # greedy: the argmax of the Q it reports
        a, info = actor.act_with_info(obs, test=True)
        assert info["greedy"] and a == int(np.argmax(info["q_values"]))
    picks = [actor.act_with_info(obs) for _ in range(400)]
    counts = np.bincount([a for a, _ in picks], minlength=4)
    assert counts.min() > 60  # epsilon = 1: uniform over the 4 actions
    assert all(info["greedy"] == (a == int(np.argmax(info["q_values"]))) for a, info in picks)
    assert picks[0][1]["q_values"].shape == (4,)


def test_greedy_q_averages_the_fixed_stratum_midpoints_and_exploring_q_samples():
    actor = IQNAgent(SPEC, IQNHyper(iqn_n=2, iqn_k=4, mini_race_actions=None), seed=0).get_actor()
    obs = np.array([0.4, -1.0, 2.0], np.float32)
    torch.manual_seed(1)
    q1 = actor.q_values(obs, test=True)
    torch.manual_seed(2)
    assert np.array_equal(q1, actor.q_values(obs, test=True))  # a greedy race can be driven again
    with torch.no_grad():  # k = 4: the midpoints of [0, 1/4), ..., [3/4, 1)
        by_hand = actor.net(None, torch.from_numpy(obs[None]), torch.tensor([0.125, 0.375, 0.625, 0.875]))
    assert np.allclose(q1, by_hand.mean(dim=0).numpy(), atol=1e-6)
    torch.manual_seed(1)
    e1 = actor.q_values(obs)
    torch.manual_seed(2)
    assert not np.allclose(e1, actor.q_values(obs))  # exploring: fractions drawn per call


def test_actor_weights_round_trip_with_exploration_rates():
    agent = IQNAgent(SPEC, IQNHyper(iqn_n=2, iqn_k=2, epsilon_schedule=[[0, 0.5], [100, 0.1]],
                                    epsilon_boltzmann_schedule=[[0, 0.2]], mini_race_actions=None), seed=0)
    agent.set_frames_played(50)
    spec = agent.actor_spec()
    assert spec["actor"] == "iqn"
    actor = IQNActor(**spec["kwargs"])
    actor.load_weights({k: v.numpy() for k, v in agent.actor_weights().items()})
    assert actor.epsilon == pytest.approx(0.3) and actor.epsilon_boltzmann == pytest.approx(0.2)
    obs = np.ones(3, np.float32)
    other = agent.get_actor()
    assert np.allclose(actor.q_values(obs, test=True), other.q_values(obs, test=True), atol=1e-5)


def test_mini_race_actor_zeroes_time_slot():
    spec = IQNNetworkSpec(float_dim=3, n_actions=2, float_hidden_dim=8, dense_hidden_dimension=16,
                          embedding_dimension=4)
    actor = IQNActor(spec.to_dict(), iqn_k=4, mini_race_actions=140, seed=0)
    twin = IQNActor(spec.to_dict(), iqn_k=4, mini_race_actions=140, seed=0)  # same weights, same taus
    twin.load_weights(actor.get_weights())
    a = actor.q_values({"float": np.array([0.0, 1.0, 2.0], np.float32)})
    b = twin.q_values({"float": np.array([99.0, 1.0, 2.0], np.float32)})
    assert np.allclose(a, b)
    assert np.allclose(actor.q_values({"float": np.array([0.0, 1.0, 2.0], np.float32)}, test=True),
                       actor.q_values({"float": np.array([-5.0, 1.0, 2.0], np.float32)}, test=True))


def test_decoupled_weight_decay_scales_the_step_by_one_minus_ratio_times_lr():
    """Linesight's decay: after the optimiser step, every online weight *= 1 - ratio * lr. Two
    agents with the same seed take the same step; with ratio 0.5 and lr 0.01 the weights are
    the undecayed ones times 0.995."""
    common = dict(iqn_n=2, iqn_k=2, lr_schedule=[[0, 1e-2]], mini_race_actions=None)
    plain = IQNAgent(SPEC, IQNHyper(**common, weight_decay_lr_ratio=0.0), seed=0)
    plain.train(batch())
    decayed = IQNAgent(SPEC, IQNHyper(**common, weight_decay_lr_ratio=0.5), seed=0)
    decayed.train(batch())
    for a, b in zip(plain.online.parameters(), decayed.online.parameters()):
        torch.testing.assert_close(b, a * 0.995)


def test_self_loss_rescaling_and_target_action_change_the_update():
    """The self-loss clamp weights items (a different step than without it) and its running means
    go through the checkpoint; mean_argmax bootstraps from another value than quantile_max."""
    common = dict(iqn_n=4, iqn_k=4, lr_schedule=[[0, 1e-2]], mini_race_actions=None, weight_decay_lr_ratio=0.0)
    off = IQNAgent(SPEC, IQNHyper(**common, target_self_loss_clamp_ratio=None), seed=0)
    on = IQNAgent(SPEC, IQNHyper(**common, target_self_loss_clamp_ratio=4.0), seed=0)
    b = batch(gamma=0.9)
    off.train(b)
    on.train(b)
    assert off.self_loss_scale is None and on.self_loss_scale is not None
    assert any(not torch.equal(x, y) for x, y in zip(off.online.parameters(), on.online.parameters()))
    resumed = IQNAgent(SPEC, IQNHyper(**common, target_self_loss_clamp_ratio=4.0), seed=1)
    resumed.load_state_dict(on.state_dict())
    assert resumed.self_loss_scale.state_dict() == on.self_loss_scale.state_dict() != {
        "typical_self_loss": 0.01, "typical_clamped_self_loss": 0.01}
    targets = {}
    for mode in ("quantile_max", "mean_argmax"):
        agent = IQNAgent(SPEC, IQNHyper(**common, target_action=mode), seed=0)
        targets[mode] = agent._loss(b)[2]
    assert (targets["quantile_max"] >= targets["mean_argmax"] - 1e-6).all()
    assert not torch.allclose(targets["quantile_max"], targets["mean_argmax"])
    with pytest.raises(ValueError):
        IQNHyper(target_action="min")


def test_state_dict_round_trip_resumes_identically():
    hp = IQNHyper(iqn_n=2, iqn_k=2, mini_race_actions=None)
    a = IQNAgent(SPEC, hp, seed=0)
    a.train(batch())
    b = IQNAgent(SPEC, hp, seed=1)
    b.load_state_dict(a.state_dict())
    for x, y in zip(a.online.parameters(), b.online.parameters()):
        assert torch.equal(x, y)
    assert b.batches_trained == 1 and b.memories_trained == 16


def test_factories_from_config_files():
    from rulka.agents.iqn.settings import make_agent, make_memory
    from rulka.config import load_config
    from rulka.registry import resolve

    configs = Path(__file__).resolve().parents[1] / "configs"
    cfg = load_config(configs / "cartpole_iqn.yaml")
    agent = resolve("agent", "iqn")(cfg=cfg, device="cpu")
    assert agent.spec.float_dim == 4 and agent.spec.n_actions == 2 and agent.hp.mini_race_actions is None
    assert make_memory(cfg).mini_race is None
    sim = load_config(configs / "sim_iqn.yaml")
    agent = make_agent(sim, device="cpu")
    # the CPU default runs without the image; the image path builds from the same file
    assert sim.nn.vis.no_image and agent.spec.image_height == 0 and agent.spec.n_actions == 12
    with_img = make_agent(load_config(configs / "sim_iqn.yaml", ["nn.vis.no_image=false"]), device="cpu")
    assert (with_img.spec.image_height, with_img.spec.image_width) == (36, 48)
    assert agent.spec.float_dim == sim.float_input_dim
    assert agent.spec.float_mean[0] == pytest.approx(sim.temporal_mini_race_duration_actions / 2)
    mem = make_memory(sim)
    assert mem.mini_race == sim.temporal_mini_race_duration_actions


def test_config_decides_the_dueling_heads_and_the_defaults_are_the_models():
    from rulka.agents.iqn.settings import hyper_from_config, make_agent
    from rulka.config import RulkaConfig, config_from_dict

    assert hyper_from_config(RulkaConfig()) == IQNHyper()  # one home for each default: the config model
    cfg = config_from_dict({"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
                            "nn": {"decoder": {"dense_hidden_dimension": 64,
                                               "advantage": {"mlp": {"hidden_dim": 48}},
                                               "value": {"mlp": {"hidden_dim": 16, "n_hidden_layers": 2}}}}})
    head = make_agent(cfg, device="cpu").online.head
    linears = lambda mlp: [(m.in_features, m.out_features) for m in mlp if isinstance(m, torch.nn.Linear)]  # noqa: E731
    dense = head.advantage[0].in_features
    assert linears(head.advantage) == [(dense, 48), (48, 2)]
    assert linears(head.value) == [(dense, 16), (16, 16), (16, 1)]
    # left unset, the value head is dense_hidden_dimension // 2 wide (the guide's null), one layer
    plain = config_from_dict({"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
                              "nn": {"decoder": {"dense_hidden_dimension": 64}}})
    assert linears(make_agent(plain, device="cpu").online.head.value) == [(dense, 32), (32, 1)]


def test_trainer_device_decides_where_the_agent_trains(tmp_path):
    """trainer.device (or RULKA_DEVICE in .env) picks the device; auto is cuda only when torch sees one."""
    from rulka.agents.iqn.settings import make_agent
    from rulka.config import load_config
    from rulka.errors import ConfigError

    config = Path(__file__).resolve().parents[1] / "configs" / "cartpole_iqn.yaml"
    assert make_agent(load_config(config, ["trainer.device=cpu"])).device == torch.device("cpu")
    auto = make_agent(load_config(config))
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    env_file = tmp_path / ".env"
    env_file.write_text("RULKA_DEVICE=cpu\n")
    assert load_config(config, env_file=env_file).trainer.device == "cpu"
    with pytest.raises(ConfigError, match="trainer.device"):
        load_config(config, ["trainer.device=gpu0"])
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="`trainer.device` is cuda but torch sees no CUDA device"):
            make_agent(load_config(config, ["trainer.device=cuda"]))


def test_publish_sends_the_online_weights_without_building_an_actor():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import ListMemory

    from rulka.agents.iqn.settings import make_agent
    from rulka.config import load_config
    from rulka.net.local import LocalHub
    from rulka.net.weights import decode_weights
    from rulka.trainer.trainer import Trainer

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "cartpole_iqn.yaml")
    agent = make_agent(cfg, device="cpu", seed=0)

    def no_actor():
        raise AssertionError("publish built an actor")

    agent.get_actor = no_actor
    key = Ed25519PrivateKey.generate()
    hub = LocalHub()
    trainer = Trainer(cfg, hub.trainer_link(), agent=agent, memory=ListMemory(), signing_key=key)
    assert trainer.publisher.publish() == 1
    blob = decode_weights([m for m in hub.worker_link("w").receive(timeout=1) if m.kind == "weights"][0].payload,
                          key.public_key())
    for name, tensor in agent.online.state_dict().items():  # as they travel (float16 for iqn, large tensors)
        assert torch.equal(blob.tensors[name], tensor.to(blob.tensors[name].dtype)), name
