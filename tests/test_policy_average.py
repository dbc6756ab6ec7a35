"""trainer.average_policy_frames: the moving average of the published weights (rulka.trainer.average).

Its formula against hand-computed values, what it leaves alone (integer tensors, the workers'
weights), that a trainer with a run folder saves it at each checkpoint and a resumed run goes on
from it, and that ``rulka eval RUN --average`` drives it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rulka.trainer.average import AVERAGE_DIR, PolicyAverage

REPO = Path(__file__).resolve().parents[1]


def test_each_version_moves_the_average_by_the_frames_played_over_the_horizon():
    avg = PolicyAverage(frames=1000)
    first = {"w": torch.tensor([0.0, 4.0]), "steps": torch.tensor([3])}
    avg.update(first, samples=100)
    assert torch.equal(avg.weights["w"], first["w"])
    first["w"].add_(100.0)  # the learner's tensors change in place: the average holds a copy
    assert avg.weights["w"].tolist() == [0.0, 4.0]
    # 250 frames later: w = 250 / 1000 = 0.25 -> 0 + 0.25 * (8 - 0), 4 + 0.25 * (0 - 4)
    avg.update({"w": torch.tensor([8.0, 0.0]), "steps": torch.tensor([7])}, samples=350)
    assert avg.weights["w"].tolist() == [2.0, 3.0]
    assert avg.weights["steps"].tolist() == [7]  # integers are the latest, never averaged
    # 100 frames: w = 0.1 -> 2 + 0.1 * (12 - 2), 3 + 0.1 * (13 - 3)
    avg.update({"w": torch.tensor([12.0, 13.0]), "steps": torch.tensor([7])}, samples=450)
    assert avg.weights["w"] == pytest.approx(torch.tensor([3.0, 4.0]))
    # more than the horizon since the last version: the newest weights alone
    avg.update({"w": torch.tensor([-1.0, -2.0]), "steps": torch.tensor([7])}, samples=2000)
    assert avg.weights["w"].tolist() == [-1.0, -2.0]


def test_the_mean_kind_weighs_every_version_alike_until_the_moving_share_is_larger():
    """trainer.average_policy_kind: mean: the n-th version since the start gets max(1/n, frames/F)."""
    avg = PolicyAverage(frames=1000, kind="mean")
    for i, v in enumerate([3.0, 6.0, 0.0, 3.0]):  # 10 frames apart: 1/n is the larger share
        avg.update({"w": torch.tensor([v])}, samples=100 + 10 * i)
    assert avg.versions == 4 and avg.weights["w"].item() == pytest.approx(3.0)  # (3 + 6 + 0 + 3) / 4
    # 500 frames later: the moving share 0.5 beats 1/5 -> 3 + 0.5 * (13 - 3)
    avg.update({"w": torch.tensor([13.0])}, samples=630)
    assert avg.weights["w"].item() == pytest.approx(8.0)
    # the cooldown's put-back starts the count again: the best's weights, then the plain mean
    avg.restart({"w": torch.tensor([1.0])}, samples=700)
    avg.update({"w": torch.tensor([3.0])}, samples=701)
    assert avg.versions == 2 and avg.weights["w"].item() == pytest.approx(2.0)
    spec = avg.spec({"actor": "x"})
    assert spec["average_policy_kind"] == "mean" and spec["versions_averaged"] == 2
    # the moving kind, same versions: only the frames count (w = 1/1000 each)
    moving = PolicyAverage(frames=1000)
    moving.update({"w": torch.tensor([1.0])}, samples=700)
    moving.update({"w": torch.tensor([3.0])}, samples=701)
    assert moving.weights["w"].item() == pytest.approx(1.002)
    with pytest.raises(ValueError):
        PolicyAverage(frames=1000, kind="median")


def test_the_mean_kind_needs_an_average_to_be_kept():
    from rulka.config import load_config
    from rulka.errors import ConfigError

    with pytest.raises(ConfigError, match="average_policy_kind"):
        load_config(REPO / "configs" / "sim_iqn.yaml",
                    overrides=["trainer.average_policy_kind=mean", "trainer.average_policy_frames=0",
                               "training.lr_cooldown_end_on_average=false"])


def test_an_actor_whose_tensors_change_starts_the_average_again():
    avg = PolicyAverage(frames=1000)
    avg.update({"a": torch.zeros(2)}, samples=0)
    avg.update({"a": torch.ones(3), "b": torch.ones(1)}, samples=10)
    assert avg.weights["a"].tolist() == [1.0, 1.0, 1.0] and avg.weights["b"].tolist() == [1.0]
    with pytest.raises(ValueError):
        PolicyAverage(frames=0)


def _trainer(run: Path, frames: int, resume: bool = False):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import ListMemory

    from rulka.agents.iqn.settings import make_agent
    from rulka.config import load_config
    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    cfg = load_config(REPO / "configs" / "cartpole_iqn.yaml", [f"trainer.average_policy_frames={frames}"])
    agent = make_agent(cfg, device="cpu", seed=0)
    hub = LocalHub()
    key = Ed25519PrivateKey.generate()
    trainer = Trainer(cfg, hub.trainer_link(), agent=agent, memory=ListMemory(), run_dir=run, signing_key=key,
                      resume=resume)
    trainer.public_key = key.public_key()  # for the test to read the weights blobs
    return trainer, agent, hub


def test_the_trainer_saves_the_average_beside_its_weights_and_a_resumed_run_goes_on_from_it(tmp_path):
    from rulka.envs.sim.policy import read_policy_file
    from rulka.net.weights import decode_weights

    run = tmp_path / "run"
    trainer, agent, hub = _trainer(run, frames=1000)
    worker = hub.worker_link("w")
    trainer.publisher.publish()
    before = {k: v.detach().clone() for k, v in agent.online.state_dict().items()}
    with torch.no_grad():
        for p in agent.online.parameters():
            p.add_(1.0)
    trainer.state.samples = 500  # half the horizon: the average sits halfway
    trainer.publisher.publish()
    trainer.checkpoint()
    _, tensors, spec = read_policy_file(run / AVERAGE_DIR / "policy.safetensors")
    assert spec["frames_averaged_to"] == 500 and spec["average_policy_frames"] == 1000
    for name, _ in agent.online.named_parameters():
        assert torch.allclose(tensors[name], before[name] + 0.5, atol=1e-6), name
    # the workers get the learner's weights, not the average
    blobs = [m for m in worker.receive(timeout=1) if m.kind == "weights"]
    last = decode_weights(blobs[-1].payload, trainer.public_key)
    for name, p in agent.online.named_parameters():  # as they travel (float16 for iqn, large tensors)
        assert torch.equal(last.tensors[name], p.detach().to(last.tensors[name].dtype)), name
    trainer.close()

    resumed, agent2, _ = _trainer(run, frames=1000, resume=True)
    assert resumed.average is not None and resumed.average.samples == 500 and resumed.average.versions == 2
    with torch.no_grad():
        for p in agent2.online.parameters():
            p.add_(1.0)  # the checkpointed weights were before + 1; these are before + 2
    resumed.state.samples = 750  # w = 250 / 1000
    resumed.publisher.publish()
    for name, _ in agent2.online.named_parameters():
        assert torch.allclose(resumed.average.weights[name], before[name] + 0.5 + 0.25 * 1.5, atol=1e-6), name
    resumed.close()


def test_rulka_eval_average_drives_the_averaged_policy_and_says_when_a_run_kept_none(tmp_path, capsys):
    from rulka.cli import main
    from rulka.evaluation import AVERAGE, policy_file_of

    run = tmp_path / "run"
    trainer, _, _ = _trainer(run, frames=1000)
    trainer.publisher.publish()
    trainer.checkpoint()
    trainer.close()
    assert policy_file_of(run, AVERAGE) == run / AVERAGE_DIR / "policy.safetensors"
    assert main(["eval", str(run), "--average", "--episodes", "1", "--max-steps", "20", "--json"]) == 0
    assert '"policy": "' + str(run / AVERAGE_DIR / "policy.safetensors") in capsys.readouterr().out
    plain = tmp_path / "plain"
    trainer, _, _ = _trainer(plain, frames=0)
    trainer.checkpoint()
    trainer.close()
    assert not (plain / AVERAGE_DIR).exists()
    assert main(["eval", str(plain), "--average", "--episodes", "1"]) == 2
    assert "kept no averaged policy" in capsys.readouterr().err
