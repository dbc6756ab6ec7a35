"""The learning-rate cooldown over the end of a run's budget (training.lr_cooldown_fraction):
the factor against hand-computed values, progress through a time and a frame budget (a resumed
run included), the learners it multiplies, the refusal where nothing would act on it, and the
whole chain through `rulka run --frames` with real processes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rulka.config import config_from_dict
from rulka.errors import ConfigError
from rulka.trainer.cooldown import LrCooldown, cooldown_factor

ROOT = Path(__file__).resolve().parent.parent


def test_factor_is_one_until_the_last_fraction_then_falls_geometrically():
    # fraction 0.2, final ratio 0.05: flat to 80 % of the budget, 0.05 ** ((p - 0.8) / 0.2) after
    assert cooldown_factor(0.0, 0.2, 0.05) == 1.0
    assert cooldown_factor(0.8, 0.2, 0.05) == 1.0
    assert cooldown_factor(0.9, 0.2, 0.05) == pytest.approx(math.sqrt(0.05))  # 0.2236
    assert cooldown_factor(0.95, 0.2, 0.05) == pytest.approx(0.05 ** 0.75)  # 0.1057
    assert cooldown_factor(1.0, 0.2, 0.05) == pytest.approx(0.05)
    assert cooldown_factor(1.7, 0.2, 0.05) == pytest.approx(0.05)  # past the budget: stays at the end value
    assert cooldown_factor(0.99, 0.0, 0.05) == 1.0  # off
    assert cooldown_factor(0.75, 0.5, 0.01) == pytest.approx(0.1)  # half way through a 50 % cooldown to 0.01


def test_a_start_ratio_steps_down_first_then_falls_geometrically_to_the_final_ratio():
    # fraction 0.2, from 0.1 to 0.01: 0.1 * 0.1 ** ((p - 0.8) / 0.2)
    assert cooldown_factor(0.79, 0.2, 0.01, 0.1) == 1.0  # before the cooldown: the schedule's rate
    assert cooldown_factor(0.8, 0.2, 0.01, 0.1) == pytest.approx(0.1)  # where it begins: the step down
    assert cooldown_factor(0.9, 0.2, 0.01, 0.1) == pytest.approx(0.1 * math.sqrt(0.1))  # 0.0316
    assert cooldown_factor(1.0, 0.2, 0.01, 0.1) == pytest.approx(0.01)
    assert cooldown_factor(2.0, 0.2, 0.01, 0.1) == pytest.approx(0.01)
    assert cooldown_factor(0.9, 0.2, 0.05, 0.05) == pytest.approx(0.05)  # start = final: a flat step down
    cool = LrCooldown(0.5, 0.01, start_ratio=0.1, budget_samples=1000)
    cool.start(samples=0)
    assert cool.factor(499) == 1.0 and cool.factor(500) == pytest.approx(0.1)
    assert cool.factor(750) == pytest.approx(0.1 * math.sqrt(0.1))
    assert "0.1 down to 0.01" in cool.describe()
    with pytest.raises(ValueError, match="start ratio"):
        LrCooldown(0.2, 0.05, start_ratio=0.01)  # below the final ratio: it would raise the rate
    with pytest.raises(ConfigError, match="lr_cooldown_start_ratio.*below"):
        config_from_dict({"training": {"lr_cooldown_start_ratio": 0.01, "lr_cooldown_final_ratio": 0.05}})


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_time_budget_counts_from_start():
    clock = Clock()
    cool = LrCooldown(0.2, 0.05, budget_seconds=1200.0, clock=clock)
    assert cool.active
    cool.start(samples=0)
    clock.t += 600  # half way
    assert cool.progress(0) == pytest.approx(0.5) and cool.factor(0) == 1.0
    clock.t += 480  # 1080 s of 1200: 90 %
    assert cool.factor(0) == pytest.approx(math.sqrt(0.05))
    clock.t += 500
    assert cool.factor(0) == pytest.approx(0.05)


def test_frame_budget_of_a_resumed_run_cools_over_what_is_left():
    # stopped at 1000 frames received in all; resumed with 200 already received: progress 0 at 200
    cool = LrCooldown(0.2, 0.05, budget_samples=1000)
    cool.start(samples=200)
    assert cool.progress(200) == 0.0
    assert cool.factor(840) == 1.0  # 80 % of the 800 left
    assert cool.factor(920) == pytest.approx(math.sqrt(0.05))
    assert cool.factor(1000) == pytest.approx(0.05)
    done = LrCooldown(0.2, 0.05, budget_samples=1000)
    done.start(samples=1500)  # nothing left of the budget: cooled from the start
    assert done.factor(1500) == pytest.approx(0.05)


def test_the_budget_nearer_its_end_decides():
    clock = Clock()
    cool = LrCooldown(0.5, 0.1, budget_seconds=100.0, budget_samples=10_000, clock=clock)
    cool.start(samples=0)
    clock.t += 10  # 10 % of the time
    assert cool.factor(7_500) == pytest.approx(0.1 ** 0.5)  # 75 % of the frames
    clock.t += 80  # 90 % of the time, 75 % of the frames
    assert cool.factor(7_500) == pytest.approx(0.1 ** 0.8)


def test_no_budget_or_no_fraction_never_changes_the_learning_rate():
    open_ended = LrCooldown(0.2, 0.05)
    open_ended.start(samples=0)
    assert not open_ended.active and open_ended.factor(10 ** 9) == 1.0
    assert "no budget" in open_ended.describe()
    off = LrCooldown(0.0, 0.05, budget_samples=100)
    off.start(samples=0)
    assert not off.active and off.factor(100) == 1.0
    assert "20%" in LrCooldown(0.2, 0.05, budget_seconds=1200).describe()
    for bad in ((1.0, 0.05), (-0.1, 0.05), (0.2, 0.0), (0.2, 1.5)):
        with pytest.raises(ValueError):
            LrCooldown(*bad)


def test_the_learners_multiply_their_schedule_by_the_factor():
    import numpy as np

    from rulka.agents.iqn.agent import IQNAgent, IQNHyper
    from rulka.agents.iqn.network import IQNNetworkSpec
    from rulka.agents.policy.ppo import PPOAgent

    hyper = IQNHyper(lr_schedule=[[0, 1e-3], [1000, 1e-4]])
    agent = IQNAgent(IQNNetworkSpec(float_dim=3, n_actions=2, float_hidden_dim=8, dense_hidden_dimension=16,
                                   embedding_dimension=8), hyper)
    agent.set_frames_played(500)
    base = 1e-3 * (0.1 ** 0.5)
    assert agent.lr == pytest.approx(base)
    agent.lr_factor = 0.25
    assert agent.lr == pytest.approx(0.25 * base)
    ppo = PPOAgent.__new__(PPOAgent)  # the lr property only reads the schedule, frames and factor
    from rulka.agents.policy.base import OptimHyper

    ppo.optim_hp = OptimHyper(lr_schedule=[[0, 3e-4]])
    ppo.frames_played = 0
    ppo.lr_factor = 0.5
    assert ppo.lr == pytest.approx(1.5e-4)
    assert np.isfinite(agent.lr)


def test_a_learner_without_a_learning_rate_schedule_refuses_the_key():
    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    cfg = config_from_dict({"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
                            "trainer": {"agent": "simple_dqn", "memory": "simple",
                                        "agent_kwargs": {"obs_dim": 4, "n_actions": 2}},
                            "training": {"lr_cooldown_fraction": 0.2}})
    with pytest.raises(ConfigError, match="lr_cooldown_fraction"):
        Trainer(cfg, LocalHub().trainer_link(), weights_encoder=lambda blob: b"w")


CARTPOLE_IQN = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"},
                "nn": {"vis": {"no_image": True}, "float": {"mlp": {"hidden_dim": 8}},
                       "iqn": {"embedding_dimension": 8}, "decoder": {"dense_hidden_dimension": 32}},
                "training": {"algorithm": "iqn", "lr_cooldown_fraction": 0.2, "lr_cooldown_from_best": True}}


def _iqn_trainer(tmp_path, cfg=CARTPOLE_IQN):
    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    return Trainer(config_from_dict(cfg), LocalHub().trainer_link(), weights_encoder=lambda blob: b"w",
                   run_dir=tmp_path / "run")


def _online(agent) -> dict:
    return {k: v.clone() for k, v in agent.online.state_dict().items()}


def test_the_cooldown_starts_from_the_best_policys_weights(tmp_path):
    """training.lr_cooldown_from_best: the best candidate's weights go into the online and the target
    network (not the weights the learner has moved to since); the optimizer still steps after it."""
    import torch

    trainer = _iqn_trainer(tmp_path)
    agent, best = trainer.agent, trainer.best_policy
    assert best is not None and best.best_weights() is None
    assert not trainer.cooldown.cool_from_best_policy()  # no best yet: the cooldown settles the current weights
    assert trainer.state.counters["cooldown_without_best"] == 1
    trainer.publisher.publish()  # v1: the first candidate, asked of a worker
    best_then = _online(agent)
    assert best.add_result(1, best.maps[0], False, None, 0.0, episode_return=180.0)
    with torch.no_grad():  # the learner moves on after the candidate
        for p in agent.online.parameters():
            p.add_(0.5)
        for p in agent.target.parameters():
            p.sub_(0.25)
    assert trainer.cooldown.cool_from_best_policy()
    for name, value in best_then.items():
        assert torch.equal(agent.online.state_dict()[name], value), name
        assert torch.equal(agent.target.state_dict()[name], value), name
    assert trainer.state.counters["cooldown_from_best"] == 1
    # weights of another network (a resumed run whose config changed): refused before anything changes
    name = next(iter(best_then))
    best._best_weights = {**best_then, name: torch.zeros(3, 3)}
    assert not trainer.cooldown.cool_from_best_policy() and trainer.state.counters["cooldown_without_best"] == 2
    assert torch.equal(agent.online.state_dict()[name], best_then[name])
    # the learner trains on from there: a step moves the online weights and leaves the target's
    agent.optimizer.zero_grad()
    sum((p * p).sum() for p in agent.online.parameters()).backward()
    agent.optimizer.step()
    name = next(n for n, _ in agent.online.named_parameters())
    assert not torch.equal(agent.online.state_dict()[name], best_then[name])
    assert torch.equal(agent.target.state_dict()[name], best_then[name])
    trainer.close()


def test_the_optimizer_starts_afresh_on_the_best_policy_only_when_asked(tmp_path):
    """training.lr_cooldown_reset_optimizer: the moments gathered on the replaced weights are dropped
    when the best policy goes back in; without it they go on."""
    def stepped(trainer) -> None:
        agent = trainer.agent
        agent.optimizer.zero_grad()
        sum((p * p).sum() for p in agent.online.parameters()).backward()
        agent.optimizer.step()

    for reset in (False, True):
        training = {**CARTPOLE_IQN["training"], "lr_cooldown_reset_optimizer": reset}
        trainer = _iqn_trainer(tmp_path / str(reset), {**CARTPOLE_IQN, "training": training})
        stepped(trainer)
        moments = {id(p): {k: v.clone() for k, v in st.items()} for p, st in trainer.agent.optimizer.state.items()}
        assert moments  # one step made them
        trainer.publisher.publish()
        assert trainer.best_policy.add_result(1, trainer.best_policy.maps[0], False, None, 0.0, episode_return=180.0)
        assert trainer.cooldown.cool_from_best_policy()
        state = trainer.agent.optimizer.state
        if reset:
            assert len(state) == 0 and trainer.state.counters["cooldown_optimizer_reset"] == 1
        else:
            assert {id(p) for p in state} == set(moments) and "cooldown_optimizer_reset" not in trainer.state.counters
            p0 = next(iter(state))
            assert all(torch_equal(state[p0][k], moments[id(p0)][k]) for k in moments[id(p0)])
        stepped(trainer)  # the learner steps on: moments again, from a step count of 1 when reset
        steps = {float(st["step"]) for st in trainer.agent.optimizer.state.values()}
        assert steps == ({1.0} if reset else {2.0})
        trainer.close()
    with pytest.raises(ConfigError, match="lr_cooldown_reset_optimizer.*lr_cooldown_from_best"):
        _iqn_trainer(tmp_path / "x", {**CARTPOLE_IQN, "training": {**CARTPOLE_IQN["training"],
                                                                     "lr_cooldown_from_best": False,
                                                                     "lr_cooldown_reset_optimizer": True}})


def test_the_average_starts_again_from_the_put_back_best_policy(tmp_path):
    """trainer.average_policy_frames with the cooldown from the best policy: the moving average of the
    weights before the jump is dropped; it goes on from the best policy's weights, moved by the
    versions after it by their frames over the horizon (hand-computed below)."""
    import torch

    cfg = {**CARTPOLE_IQN, "trainer": {"average_policy_frames": 1000}}
    trainer = _iqn_trainer(tmp_path, cfg)
    agent, best, avg = trainer.agent, trainer.best_policy, trainer.average
    assert avg is not None
    trainer.publisher.publish()  # v1: the best candidate, and the average's first weights
    best_then = {k: v.clone() for k, v in agent.actor_weights().items()}
    assert best.add_result(1, best.maps[0], False, None, 0.0, episode_return=180.0)
    with torch.no_grad():
        for p in agent.online.parameters():
            p.add_(1.0)
    trainer.state.samples = 400
    trainer.publisher.publish()  # v2 moves the average: share 400 / 1000 of a network the cooldown will drop
    params = dict(agent.online.named_parameters())
    name = next(iter(params))
    assert not torch.equal(avg.weights[name], best_then[name])
    trainer.state.samples = 500
    assert trainer.cooldown.cool_from_best_policy()
    assert trainer.state.counters["average_restarted"] == 1
    assert all(torch.equal(avg.weights[k], v) for k, v in best_then.items())
    assert avg.samples == 500
    with torch.no_grad():  # the learner trains on from the best policy: +2 on every weight
        for p in agent.online.parameters():
            p.add_(2.0)
    trainer.state.samples = 750
    trainer.publisher.publish()  # share 250 / 1000: best + 0.25 * 2
    for k in params:
        assert torch.allclose(avg.weights[k], best_then[k] + 0.5), k
    trainer.close()


def test_a_run_stopped_inside_its_cooldown_ends_on_the_averaged_weights(tmp_path):
    """training.lr_cooldown_end_on_average: the moving average goes into the online and the target
    network, and the last checkpoint's weights/ hold it (the same tensors as average/); a run stopped
    before its cooldown keeps the weights it trained (logged, counted)."""
    import torch

    from rulka.envs.sim.policy import read_policy_file
    from rulka.trainer.average import AVERAGE_DIR

    cfg = {**CARTPOLE_IQN, "trainer": {"average_policy_frames": 1000},
           "training": {**CARTPOLE_IQN["training"], "lr_cooldown_end_on_average": True}}
    trainer = _iqn_trainer(tmp_path, cfg)
    agent = trainer.agent
    trainer.cooldown.schedule = LrCooldown(0.2, 0.05, budget_samples=1000)
    trainer.cooldown.schedule.start(samples=0)
    trainer.publisher.publish()  # the average's first weights: w0
    first = _online(agent)
    with torch.no_grad():
        for p in agent.online.parameters():
            p.add_(1.0)
    trainer.state.samples = 500  # half the horizon: the average is w0 + 0.5
    trainer.publisher.publish()
    trained = _online(agent)
    # at 70 % of the budget the cooldown (the last 20 %) has not begun: the trained weights stay
    assert trainer.cooldown.end_on_averaged_weights() is False
    assert trainer.state.counters["end_on_average_skipped"] == 1
    assert all(torch.equal(agent.online.state_dict()[k], v) for k, v in trained.items())
    trainer.state.samples = 900  # inside the cooldown
    assert trainer.cooldown.end_on_averaged_weights() is True
    assert trainer.state.counters["ended_on_average"] == 1
    for name, _ in agent.online.named_parameters():
        assert torch.allclose(agent.online.state_dict()[name], first[name] + 0.5, atol=1e-6), name
        assert torch.equal(agent.target.state_dict()[name], agent.online.state_dict()[name]), name
    trainer.checkpoint()
    _, final, _ = read_policy_file(tmp_path / "run" / "weights" / "policy.safetensors")
    _, averaged, _ = read_policy_file(tmp_path / "run" / AVERAGE_DIR / "policy.safetensors")
    floats = [k for k, v in averaged.items() if torch.is_floating_point(v) and k != "exploration"]
    assert floats and [k for k in floats if not torch.equal(final[k], averaged[k])] == []
    # nothing is lost: the weights it trained last are kept in trained/
    _, kept, _ = read_policy_file(tmp_path / "run" / "trained" / "policy.safetensors")
    assert all(torch.equal(kept[k], trained[k]) for k in trained)
    trainer.close()


def test_ending_on_the_average_is_refused_where_nothing_would_act_on_it(tmp_path):
    training = {**CARTPOLE_IQN["training"], "lr_cooldown_end_on_average": True}
    for i, (change, why) in enumerate((
            ({"training": training}, "keeps no average"),
            ({"training": {**training, "lr_cooldown_fraction": 0.0, "lr_cooldown_from_best": False},
              "trainer": {"average_policy_frames": 1000}}, "lr_cooldown_fraction is 0"))):
        with pytest.raises(ConfigError, match=f"lr_cooldown_end_on_average.*{why}"):
            _iqn_trainer(tmp_path / str(i), {**CARTPOLE_IQN, **change})


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_a_resumed_run_cools_from_the_best_policy_file(tmp_path):
    """After a restart the best policy's weights come from <run>/best/policy.safetensors."""
    import torch

    from rulka.trainer.best import BestPolicy

    folder = tmp_path / "best"
    bp = BestPolicy(["a"], folder)
    bp.mark(4, {"w": torch.tensor([4.0, 2.0])}, {"actor": "x", "kwargs": {}}, frames=100, updates=1)
    assert bp.add_result(4, "a", True, 20_000, 617.0)
    assert bp.best_weights()["w"].tolist() == [4.0, 2.0]
    again = BestPolicy(["a"], folder)
    assert again.best is not None and again.best_weights()["w"].tolist() == [4.0, 2.0]
    (folder / "policy.safetensors").write_bytes(b"garbage")
    assert BestPolicy(["a"], folder).best_weights() is None  # unreadable: logged, the current weights cool
    assert BestPolicy(["a"], tmp_path / "none").best_weights() is None


def test_cooldown_from_best_is_refused_where_nothing_would_act_on_it(tmp_path):
    training = CARTPOLE_IQN["training"]
    for i, (change, why) in enumerate((
            ({"training": {**training, "lr_cooldown_fraction": 0.0}}, "lr_cooldown_fraction is 0"),
            ({"map_cycle": {"keep_best_policy": False}}, "keeps no best policy"),
            ({"training": {**training, "algorithm": "ppo"}}, "cannot load published weights"))):
        with pytest.raises(ConfigError, match=f"lr_cooldown_from_best.*{why}"):
            _iqn_trainer(tmp_path / str(i), {**CARTPOLE_IQN, **change})


@pytest.mark.integration
@pytest.mark.slow
def test_rulka_run_cools_the_learning_rate_over_its_frame_budget(tmp_path):
    """The whole chain: `rulka run --frames` tells the trainer its budget, the learning rate logged
    at the end of the run is the schedule's value times the final ratio, and the cooldown started
    from the best policy (training.lr_cooldown_from_best) after a step down (lr_cooldown_start_ratio)."""
    run_dir = tmp_path / "run"
    rulka = [sys.executable, "-c", "import sys; from rulka.cli import main; sys.exit(main())"]
    frames = 8000
    cmd = [*rulka, "run", str(ROOT / "configs" / "cartpole_iqn.yaml"), "--workers", "1",
           "--frames", str(frames), "--minutes", "4", "--run-dir", str(run_dir),
           "--set", "logging.wandb.enabled=false", "--set", "logging.progress=never", "--set", "logging.log_every_s=1",
           "--set", "training.lr_schedule=[[0,1.0e-3]]", "--set", "training.lr_cooldown_fraction=0.5",
           "--set", "training.lr_cooldown_final_ratio=0.01", "--set", "memory.memory_size_schedule=[[0,[50000,500]]]",
           "--set", "training.lr_cooldown_from_best=true", "--set", "trainer.best_policy_every_frames=1000",
           "--set", "training.lr_cooldown_start_ratio=0.1", "--set", "trainer.average_policy_frames=2000",
           "--set", "training.lr_cooldown_end_on_average=true"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"metrics"' in line]
    lrs = [(m["charts/samples_received"], m["charts/learning_rate"]) for m in rows if "charts/learning_rate" in m]
    assert lrs, "no learning rate logged"
    early = [lr for s, lr in lrs if s < 0.4 * frames]
    late = lrs[-1]
    assert early and max(early) == pytest.approx(1e-3)  # before the last half: the schedule's value
    # training.lr_cooldown_start_ratio 0.1: the cooldown begins with a step down to a tenth, never above it
    cooled = [lr for s, lr in lrs if s >= 0.55 * frames]
    assert cooled and max(cooled) <= 1e-4 * 1.001, lrs
    # the last update was made near the end of the budget: the factor is near 0.01
    assert late[0] >= 0.9 * frames and late[1] < 1e-3 * 0.01 ** 0.7, lrs[-5:]
    # training.lr_cooldown_from_best: when the cooldown began, the learner went back to the best policy once
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    counters = json.loads((run_dir / "checkpoints" / latest["checkpoint"] / "trainer.json").read_text())["counters"]
    assert counters.get("cooldown_from_best") == 1 and "cooldown_without_best" not in counters, counters
    # training.lr_cooldown_end_on_average: the run stopped at its budget, inside the cooldown, and its
    # end weights are the moving average (the same tensors in weights/ and average/)
    assert counters.get("ended_on_average") == 1 and "end_on_average_skipped" not in counters, counters
    import torch

    from rulka.envs.sim.policy import read_policy_file
    _, final, _ = read_policy_file(run_dir / "weights" / "policy.safetensors")
    _, averaged, _ = read_policy_file(run_dir / "average" / "policy.safetensors")
    floats = [k for k, v in averaged.items() if torch.is_floating_point(v) and k != "exploration"]
    assert floats and [k for k in floats if not torch.equal(final[k], averaged[k])] == []
    assert (run_dir / "trained" / "policy.safetensors").is_file()  # the weights it trained last, kept
    # inside the cooldown every other best-policy candidate was the average so far (rulka.trainer.best)
    assert counters.get("eval_policy_average_versions", 0) >= 1, counters


def test_the_time_left_is_the_budget_that_ends_first():
    """The progress line's budget field: the share used and the time left, from a time budget's
    remainder or from the frames left at the mean rate so far, whichever ends first."""
    clock = Clock()
    cool = LrCooldown(0.0, 0.05, budget_seconds=1200.0, budget_samples=100_000, clock=clock)
    assert cool.seconds_left(0) is None and cool.budget_text(0) is None  # not started
    cool.start(samples=0)
    assert cool.seconds_left(0) == pytest.approx(1200.0)  # no frames yet: the time budget alone
    clock.t += 300
    # 10k of 100k frames in 300 s: 90k left at 33.3/s = 2700 s, after the 900 s the clock has left
    assert cool.seconds_left(10_000) == pytest.approx(900.0)
    assert cool.budget_text(10_000) == "25% ~15 min left"
    # 50k frames in 300 s: the frames end first, 50k at 166.7/s = 300 s
    assert cool.seconds_left(50_000) == pytest.approx(300.0)
    assert cool.budget_text(50_000) == "50% ~5 min left"
    clock.t += 895
    assert cool.budget_text(60_000) == "100% ~5 s left"
    clock.t += 100
    assert cool.seconds_left(60_000) == 0.0 and cool.budget_text(60_000) == "100% ~0 s left"
    # a resumed run's frame budget counts from the frames it resumed with
    resumed = LrCooldown(0.2, 0.05, budget_samples=1_000, clock=clock)
    resumed.start(samples=600)
    clock.t += 40
    assert resumed.seconds_left(800) == pytest.approx(40.0)  # 200 frames in 40 s, 200 left
    assert resumed.seconds_left(1_000) == 0.0
    open_ended = LrCooldown(0.2, 0.05, clock=clock)
    open_ended.start(samples=0)
    assert open_ended.seconds_left(10) is None and open_ended.budget_text(10) is None


class _Fields:
    """A progress display that keeps what the trainer shows."""

    def __init__(self) -> None:
        self.fields: dict = {}

    def update(self, **fields) -> None:
        self.fields.update(fields)

    def close(self) -> None:
        pass


def test_the_trainers_progress_line_shows_its_budget_only_when_it_has_one():
    import threading

    from roles_helpers import CountingAgent, ListMemory

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    shown = _Fields()
    trainer = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), progress=shown,
                      weights_encoder=lambda blob: b"w")
    trainer.run(max_seconds=0.5)
    assert shown.fields["budget"].startswith("100%"), shown.fields
    shown = _Fields()
    trainer = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), progress=shown,
                      weights_encoder=lambda blob: b"w")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    trainer.run(stop_event=stop)  # stopped from outside with no budget: no budget field
    assert "samples" in shown.fields and "budget" not in shown.fields, shown.fields
