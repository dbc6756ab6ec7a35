"""Freeze flags (the guide's prefixes, ``_orig_mod.`` normalised, frozen tensors out of the
optimizer and unchanged by training), ``nn.init_from_pretrained`` and the IQN reset knobs."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from rulka.agents.iqn.agent import IQNAgent
from rulka.agents.iqn.network import IQNNetwork
from rulka.agents.iqn.replay import ReplayBatch
from rulka.agents.iqn.reset import IQNResetter, ResetSettings, last_layer_names, shrink_and_perturb
from rulka.config import config_from_dict
from rulka.errors import ConfigError
from rulka.nn.freeze import apply_freeze
from rulka.nn.pretrained import save_pretrained

GYM = {"backend": "gym", "gym_id": "CartPole-v1"}
NN = {"float": {"mlp": {"hidden_dim": 16}}, "decoder": {"dense_hidden_dimension": 32}, "iqn": {"embedding_dimension": 8},
      "training": {"use_jit": False}}


def iqn_cfg(nn: dict | None = None, **sections):
    merged = {**NN, **(nn or {})}
    return config_from_dict({"environment": GYM, "training": {"algorithm": "iqn", "batch_size": 16,
                                                              "lr_schedule": [[0, 1e-2]]}, "nn": merged, **sections})


def make_iqn(nn: dict | None = None) -> IQNAgent:
    from rulka.agents.iqn.settings import make_agent

    return make_agent(iqn_cfg(nn), device="cpu", seed=0)


def batch(b=16):
    rng = np.random.default_rng(0)
    return ReplayBatch(state_img=None, state_float=rng.normal(size=(b, 4)).astype(np.float32),
                       action=rng.integers(0, 2, b), reward=np.ones(b, np.float32), next_img=None,
                       next_float=rng.normal(size=(b, 4)).astype(np.float32), gamma=np.zeros(b, np.float32),
                       weights=np.ones(b, np.float32), slots=np.arange(b))


def optimizer_ids(opt) -> set[int]:
    return {id(p) for g in opt.param_groups for p in g["params"]}


def test_iqn_freeze_flags_keep_their_tensors_out_of_training(caplog):
    with caplog.at_level(logging.INFO, logger="rulka.nn.freeze"):
        agent = make_iqn({"float": {"mlp": {"hidden_dim": 16}, "freeze": True}, "iqn": {"embedding_dimension": 8, "freeze": True},
                          "decoder": {"dense_hidden_dimension": 32, "value": {"freeze": True}},
                          "vis": {"no_image": True, "freeze": True}})
    frozen = {n for n, p in agent.online.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(("float_feature_extractor.", "iqn_fc.", "head.value.")) for n in frozen)
    assert {n.split(".")[0] for n in frozen} == {"float_feature_extractor", "iqn_fc", "head"}
    ids = optimizer_ids(agent.optimizer)
    assert all((id(p) in ids) == p.requires_grad for p in agent.online.parameters())
    # the log names the active prefixes and the one this network lacks (no image head)
    text = caplog.text
    assert "float_feature_extractor." in text and "iqn_fc." in text and "head.value." in text
    assert "not in this network: img_head." in text
    before = {n: p.detach().clone() for n, p in agent.online.named_parameters()}
    for _ in range(5):
        agent.train(batch())
    for n, p in agent.online.named_parameters():
        assert torch.equal(p, before[n]) == (n in frozen), n


def test_policy_freeze_flags_and_algorithm_specific_flags():
    from rulka.agents.policy.settings import make_agent

    base = {"environment": GYM, "training": {"algorithm": "ppo"}}
    cfg = config_from_dict({**base, "nn": {**NN, "decoder": {"dense_hidden_dimension": 32, "shared_trunk_freeze": True,
                                                               "advantage": {"freeze": True}}}})
    agent = make_agent(cfg, device="cpu", seed=0)
    frozen = {n.split(".")[0] for n, p in agent.net.named_parameters() if not p.requires_grad}
    assert frozen == {"trunk", "policy_head"}
    assert all((id(p) in optimizer_ids(agent.optimizer)) == p.requires_grad for p in agent.net.parameters())
    # the IQN-only flag on a policy learner, and the policy-only flag on IQN, are refused by name
    with pytest.raises(ConfigError, match="`nn.iqn.freeze` does not apply to training.algorithm ppo"):
        make_agent(config_from_dict({**base, "nn": {**NN, "iqn": {"freeze": True}}}), device="cpu")
    with pytest.raises(ConfigError, match="`nn.decoder.shared_trunk_freeze` does not apply"):
        make_iqn({"decoder": {"dense_hidden_dimension": 32, "shared_trunk_freeze": True}})


def test_validation_refuses_flags_for_learners_they_do_not_apply_to():
    from rulka.config.built import check_built

    with pytest.raises(ConfigError, match="`nn.iqn.freeze` does not apply to training.algorithm ppo"):
        check_built(config_from_dict({"training": {"algorithm": "ppo"}, "nn": {"iqn": {"freeze": True}}}))
    with pytest.raises(ConfigError, match="`nn.vis.freeze` does not apply to training.algorithm sac"):
        check_built(config_from_dict({"training": {"algorithm": "sac"}, "environment": {"continuous_actions": True},
                                      "nn": {"vis": {"no_image": True, "freeze": True}}}))
    with pytest.raises(ConfigError, match="`nn.training.overall_reset_mul_factor` .IQN resets. does not apply"):
        check_built(config_from_dict({"training": {"algorithm": "grpo"},
                                      "nn": {"training": {"overall_reset_mul_factor": 0.5}}}))
    check_built(config_from_dict({"training": {"algorithm": "iqn"}, "nn": {"iqn": {"freeze": True},
                                                                          "training": {"overall_reset_mul_factor": 0.5}}}))


# torch.compile imports torch.utils.mkldnn, which uses the deprecated torch.jit.script_method (torch 2.13)
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_names_are_normalised():
    net = IQNNetwork(make_iqn().spec)
    compiled = torch.compile(net)  # parameters named _orig_mod.<name>
    assert next(iter(dict(compiled.named_parameters()))).startswith("_orig_mod.")
    counts = apply_freeze(compiled, ["float_feature_extractor."])
    assert counts == {"float_feature_extractor.": len(list(net.float_feature_extractor.parameters()))}
    assert not any(p.requires_grad for p in net.float_feature_extractor.parameters())


def test_init_from_pretrained_loads_matching_tensors_into_online_and_target(tmp_path):
    source = make_iqn()
    with torch.no_grad():
        for p in source.online.float_feature_extractor.parameters():
            p.add_(1.0)
    saved = {k: v for k, v in source.online.state_dict().items() if k.startswith("float_feature_extractor.")}
    save_pretrained(tmp_path / "pre", {f"_orig_mod.{k}": v for k, v in saved.items()}, network="iqn")
    agent = make_iqn({"init_from_pretrained": str(tmp_path / "pre")})
    assert agent.prepared["loaded"] == sorted(saved)
    for net in (agent.online, agent.target):
        state = net.state_dict()
        assert all(torch.equal(state[k], v) for k, v in saved.items())
    # tensors the folder lacks keep the fresh initialisation
    fresh = make_iqn()  # same seed: the same initialisation
    assert torch.equal(agent.online.state_dict()["iqn_fc.0.weight"], fresh.online.state_dict()["iqn_fc.0.weight"])
    # another shape, or an empty folder: a clear error naming the key
    save_pretrained(tmp_path / "bad", {"float_feature_extractor.0.weight": torch.zeros(3, 3)}, network="iqn")
    with pytest.raises(ConfigError, match="nn.init_from_pretrained.*shapes differ"):
        make_iqn({"init_from_pretrained": str(tmp_path / "bad")})
    with pytest.raises(ConfigError, match="nn.init_from_pretrained"):
        make_iqn({"init_from_pretrained": str(tmp_path / "nothing")})


def constant_nets(value: float, fresh_value: float):
    spec = make_iqn().spec
    net, fresh = IQNNetwork(spec), IQNNetwork(spec)
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(value)
        for p in fresh.parameters():
            p.fill_(fresh_value)
    return net, fresh


def test_shrink_and_perturb_by_hand():
    net, fresh = constant_nets(1.0, 0.0)
    last = last_layer_names(net)
    assert last == ["head.advantage.2.weight", "head.advantage.2.bias"]  # Linear, LeakyReLU, Linear
    shrink_and_perturb(net, fresh, overall=0.25, last_layer=0.5, last_names=last, skip_prefixes=["iqn_fc."])
    for name, p in net.named_parameters():
        if name.startswith("iqn_fc."):
            want = 1.0  # frozen: untouched
        elif name in last:
            want = 0.5 * 0.75  # 0.75 after the overall step, then half kept
        else:
            want = 0.75  # (1 - 0.25) * 1 + 0.25 * 0
        assert torch.allclose(p, torch.full_like(p, want)), name
    # overall 0: nothing but the last layer; last_layer 1: that layer keeps the overall step's value
    net, fresh = constant_nets(1.0, 3.0)
    shrink_and_perturb(net, fresh, overall=0.0, last_layer=1.0, last_names=last)
    assert all(torch.allclose(p, torch.ones_like(p)) for p in net.parameters())
    shrink_and_perturb(net, fresh, overall=1.0, last_layer=1.0, last_names=last)
    assert all(torch.allclose(p, torch.full_like(p, 3.0)) for p in net.parameters())


def test_reset_schedule_flag_and_credit():
    agent = make_iqn({"training": {"use_jit": False, "reset_every_n_frames_generated": 1000,
                                   "additional_transition_after_reset": 640, "overall_reset_mul_factor": 0.5}})
    r = agent.resetter
    assert r.settings.reset_every_n_frames_generated == 1000
    b = batch()
    b.frames_played = 999
    agent.train(b)
    assert r.resets == 0 and agent.take_sample_credit() == 0
    b.frames_played = 1000
    agent.train(b)  # 1000 frames since the start: a reset, then the update
    assert r.resets == 1 and r.last_reset_frames == 1000
    assert agent.take_sample_credit() == 640 and agent.take_sample_credit() == 0
    b.frames_played = 1999
    agent.train(b)
    assert r.resets == 1
    # single_reset_flag: a run resumed with a bumped flag resets once
    state = agent.state_dict()
    bumped = make_iqn({"training": {"use_jit": False, "single_reset_flag": 1}})
    bumped.load_state_dict(state)
    assert bumped.resetter.flag_seen == 0 and bumped.resetter.due(bumped.frames_played)
    bumped.train(b)
    assert bumped.resetter.resets == 2 and not bumped.resetter.due(bumped.frames_played)
    assert bumped.state_dict()["reset"]["flag_seen"] == 1
    # the default: never
    default = IQNResetter(ResetSettings())
    assert not default.due(10**12)


def test_a_reset_leaves_frozen_tensors_alone():
    agent = make_iqn({"float": {"mlp": {"hidden_dim": 16}, "freeze": True},
                      "training": {"use_jit": False, "reset_every_n_frames_generated": 1, "overall_reset_mul_factor": 1.0}})
    frozen = {n: p.detach().clone() for n, p in agent.online.named_parameters() if n.startswith("float_feature_extractor.")}
    agent.frames_played = 10
    assert agent.resetter.step(agent)
    state = agent.online.state_dict()
    assert all(torch.equal(state[n], v) for n, v in frozen.items())


def test_decoupled_weight_decay_leaves_frozen_tensors_alone():
    agent = make_iqn({"float": {"mlp": {"hidden_dim": 16}, "freeze": True}})
    assert agent.hp.weight_decay_lr_ratio > 0  # the default decays after every step
    before = {n: p.detach().clone() for n, p in agent.online.named_parameters()}
    frozen = {n for n, p in agent.online.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith("float_feature_extractor.") for n in frozen)
    agent.decay_weights(0.5)  # by hand: trainable tensors halve, frozen ones keep every value
    for n, p in agent.online.named_parameters():
        assert torch.equal(p, before[n] if n in frozen else before[n] * 0.5), n
    # and through training, with a decay large enough to show (1 - 0.5 * lr per step)
    agent.hp.weight_decay_lr_ratio = 50.0
    agent.train(batch())
    for n, p in agent.online.named_parameters():
        assert torch.equal(p, before[n]) == (n in frozen), n
