"""``rulka pretrain bc|dqfd`` start from the optimal-race solver's tapes end to end: ``rulka sim
optimal`` writes a tape, ``rulka pretrain record --tape`` makes it episode files, and both
pretraining objectives train on them into a folder the IQN learner starts from."""

from __future__ import annotations

import json

import pytest
import yaml

from rulka.cli import main
from rulka.config import load_config
from rulka.pretrain.data import episode_files, load_steps

# a short track (one corner, ~5 s): the solver runs in seconds
SHORT = {"name": "short", "width": 14, "runoff": 6,
         "pieces": [{"straight": 40}, {"turn": 90, "radius": 30}, {"straight": 30}]}
SMALL_NN = {"float": {"mlp": {"hidden_dim": 32}}, "decoder": {"dense_hidden_dimension": 64},
            "iqn": {"embedding_dimension": 16}, "training": {"use_jit": False}, "vis": {"no_image": True}}


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """(config, demo folder, the tape's actions): the solver's tape on the short track, recorded."""
    tmp = tmp_path_factory.mktemp("tapes")
    track = tmp / "short.json"
    track.write_text(json.dumps(SHORT), encoding="utf-8")
    tape = tmp / "tape.json"
    assert main(["sim", "optimal", str(track), "--out", str(tape), "--width", "2", "--no-double", "--random-seeds", "0",
                 "--quiet"]) == 0
    config = tmp / "iqn.yaml"
    config.write_text(yaml.safe_dump({"environment": {"backend": "sim", "track": str(track)},
                                      "training": {"algorithm": "iqn"}, "nn": SMALL_NN}), encoding="utf-8")
    out = tmp / "demos"
    assert main(["pretrain", "record", str(config), "--out", str(out), "--tape", str(tape)]) == 0
    actions = json.loads(tape.read_text(encoding="utf-8"))["actions"]
    return str(config), out, actions


@pytest.mark.parametrize("objective", ["bc", "dqfd"])
def test_pretraining_from_a_solver_tape_gives_the_learner_its_start(tmp_path, demos, objective):
    """The tape's race as demonstrations: the objective's loss falls over the updates and the IQN
    learner starts from every tensor of what it wrote. (Whether that start learns faster than IQN from
    scratch is the seed study's question, not this test's.)"""
    from rulka.agents.iqn.settings import make_agent

    config, folder, actions = demos
    steps = load_steps(episode_files([folder]), with_images=False)
    assert steps.actions.tolist() == actions and steps.episodes == 1  # the tape's race, action for action
    out = tmp_path / objective
    assert main(["pretrain", "bc", config, str(folder), "--out", str(out), "--objective", objective,
                 "--updates", "60", "--batch-size", "32", "--lr", "3e-3"]) == 0
    summary = json.loads((out / "bc_summary.json").read_text(encoding="utf-8"))
    first, last = ("first_margin_loss", "last_margin_loss") if objective == "dqfd" else ("first_loss", "last_loss")
    assert summary[last] < 0.7 * summary[first], summary
    agent = make_agent(load_config(config, overrides=[f"nn.init_from_pretrained={out}"]), device="cpu", seed=1)
    assert agent.prepared["loaded"] == sorted(agent.online.state_dict())
