"""The guide's checkpoint layout in the trainer's folders: every checkpoint (``checkpoints/ckpt-N/``),
``weights/`` and ``best/`` carry the network's Hugging Face parts (``hf_transformer_vis/``,
``hf_transformer_fusion/``, transformers' save_pretrained layout) beside rulka's safetensors,
written atomically; ``nn.init_from_pretrained`` loads a run folder, its ``weights/``, ``best/`` or
a checkpoint folder. Tiny models saved to a temporary folder: nothing downloads."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from roles_helpers import ListMemory

from rulka.config import config_from_dict
from rulka.net.local import LocalHub
from rulka.nn.hf import replace_folder
from rulka.nn.pretrained import normalise_name
from rulka.trainer.trainer import Trainer

KEY = Ed25519PrivateKey.generate()
PARTS = ["hf_transformer_fusion", "hf_transformer_vis"]


def config(algorithm: str, nn: dict, **more_nn) -> dict:
    small = {"float": {"mlp": {"hidden_dim": 16}}, "decoder": {"dense_hidden_dimension": 32},
             "iqn": {"embedding_dimension": 8}, "training": {"use_jit": False}}
    return {"environment": {"backend": "sim"}, "training": {"algorithm": algorithm},
            "nn": {**small, **nn, **more_nn}}


def build(data: dict, seed: int = 0):
    """(agent, its network) for the config."""
    cfg = config_from_dict(data)
    if cfg.training.algorithm == "iqn":
        from rulka.agents.iqn.settings import make_agent

        agent = make_agent(cfg, device="cpu", seed=seed)
        return agent, agent.online
    from rulka.agents.policy.settings import make_agent

    agent = make_agent(cfg, device="cpu", seed=seed)
    return agent, agent.net


def trained_like(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Move every weight away from what a fresh build (hub weights included) gives; return the state."""
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return {normalise_name(k): v.detach().clone() for k, v in net.state_dict().items()}


def checkpointed(data: dict, run):
    """A trainer on ``run`` with the config's agent (weights moved off their start) writes one
    checkpoint; returns (network, its state, the checkpoint folder)."""
    agent, net = build(data)
    want = trained_like(net)
    trainer = Trainer(None, LocalHub().trainer_link(), agent=agent, memory=ListMemory(), run_dir=run, signing_key=KEY)
    folder = trainer.checkpoint()
    trainer.close()
    return net, want, folder


def assert_starts_from(data: dict, folder, want: dict[str, torch.Tensor]) -> None:
    agent, net = build({**data, "nn": {**data["nn"], "init_from_pretrained": str(folder)}}, seed=1)
    assert agent.prepared["loaded"] == sorted(net.state_dict())  # every tensor of the network
    for k, v in net.state_dict().items():
        assert torch.equal(v, want[normalise_name(k)]), k


def hf_folders(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "hf_transformer" in p.name)


def assert_parts_hold(folder, net: torch.nn.Module, transformers) -> None:
    """The sub-folders load with transformers and hold the network's current HF weights."""
    assert hf_folders(folder) == PARTS  # no leftover .tmp / .old
    for name, part in (("hf_transformer_vis", net.img_head.model), ("hf_transformer_fusion", net.fusion.trunk.model)):
        loaded = transformers.AutoModel.from_pretrained(folder / name).state_dict()
        own = part.state_dict()
        assert loaded.keys() == own.keys()
        assert all(torch.equal(loaded[k], own[k]) for k in own), name


@pytest.mark.parametrize("algorithm", ["iqn", "ppo"])
def test_trainer_checkpoints_carry_the_hf_parts_and_init_from_pretrained_loads_them(hub, tmp_path, algorithm):
    from rulka.trainer.checkpoint_store import verify_manifest

    transformers = pytest.importorskip("transformers")
    data = config(algorithm, hf_nn(hub))
    run = tmp_path / "run"
    net, want, folder = checkpointed(data, run)
    for where in (run / "weights", folder):
        assert_parts_hold(where, net, transformers)
    verify_manifest(folder)  # the parts are part of the checkpoint's checksums
    # a new run starts from the run folder (its weights/), weights/ itself or the checkpoint folder
    for where in (run, run / "weights", folder):
        assert_starts_from(data, where, want)
    # or from one part in transformers' layout: that part's tensors only
    agent2, net2 = build({**data, "nn": {**data["nn"], "init_from_pretrained": str(folder / "hf_transformer_vis")}}, seed=1)
    assert agent2.prepared["loaded"] == sorted(k for k in net2.state_dict() if k.startswith("img_head.model."))
    assert all(torch.equal(v, want[k]) for k, v in net2.state_dict().items() if k.startswith("img_head."))


def test_the_best_policy_folder_carries_the_hf_parts_and_loads(hub, tmp_path):
    from rulka.trainer.best import BestPolicy

    transformers = pytest.importorskip("transformers")
    data = config("iqn", hf_nn(hub))
    agent, net = build(data)
    want = trained_like(net)
    best = BestPolicy(["m"], tmp_path / "best")
    best.mark(1, agent.actor_weights(), agent.actor_spec(), frames=100, updates=10)
    with torch.no_grad():  # training goes on: best/ keeps the marked version
        for p in net.parameters():
            p.add_(1.0)
    assert best.add_result(1, "m", True, 20_000.0, 600.0)
    agent2, net2 = build(data, seed=3)
    net2.load_state_dict(want)  # the network as it was when marked
    assert_parts_hold(tmp_path / "best", net2, transformers)
    assert_starts_from(data, tmp_path / "best", want)


def test_a_crash_while_writing_the_parts_leaves_the_previous_complete_ones(hub, tmp_path, monkeypatch):
    from rulka.nn import hf
    from rulka.trainer.checkpoint_store import latest_checkpoint

    transformers = pytest.importorskip("transformers")
    data = config("iqn", hf_nn(hub))
    agent, net = build(data)
    run = tmp_path / "run"
    trainer = Trainer(None, LocalHub().trainer_link(), agent=agent, memory=ListMemory(), run_dir=run, signing_key=KEY)
    first = trainer.checkpoint()
    saved = {normalise_name(k): v.detach().clone() for k, v in net.state_dict().items()}
    trained_like(net)

    def half_then_crash(self, folder):
        os.makedirs(folder)
        (folder / "config.json").write_text("{}")  # half a save_pretrained folder
        raise OSError("disk full")

    monkeypatch.setattr(hf._HfModule, "save_pretrained", half_then_crash)
    with pytest.raises(OSError, match="disk full"):
        trainer.checkpoint()
    with pytest.raises(OSError, match="disk full"):
        trainer.checkpointer.save_policy()
    monkeypatch.undo()
    trainer.close()
    assert latest_checkpoint(run / "checkpoints") == first
    net.load_state_dict(saved)
    for where in (first, run / "weights"):  # the complete parts of the first save, nothing half-written
        assert_parts_hold(where, net, transformers)
    assert_starts_from(data, run, saved)


def test_replace_folder_swaps_whole_folders_and_recovers_from_a_crash_between_renames(tmp_path):
    def writer(text: str, fail: bool = False):
        def write(path):
            path.mkdir()
            (path / "a.txt").write_text(text)
            if fail:
                raise OSError("crash")
            (path / "b.txt").write_text(text)
        return write

    def content():
        part = tmp_path / "part"
        return sorted((p.name, p.read_text()) for p in part.iterdir())

    replace_folder(tmp_path, "part", writer("v1"))
    assert content() == [("a.txt", "v1"), ("b.txt", "v1")]
    with pytest.raises(OSError):
        replace_folder(tmp_path, "part", writer("v2", fail=True))
    assert content() == [("a.txt", "v1"), ("b.txt", "v1")]  # the old folder, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part"]  # the half-written temporary is gone
    (tmp_path / ".part.tmp").mkdir()  # as a killed process leaves it
    (tmp_path / ".part.tmp" / "a.txt").write_text("half")
    replace_folder(tmp_path, "part", writer("v3"))  # cleared first
    assert content() == [("a.txt", "v3"), ("b.txt", "v3")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part"]
    # a crash between the two renames: the complete old folder stepped aside, the new one never arrived
    os.replace(tmp_path / "part", tmp_path / ".part.old")
    with pytest.raises(OSError):
        replace_folder(tmp_path, "part", writer("v4", fail=True))
    assert content() == [("a.txt", "v3"), ("b.txt", "v3")]  # put back before anything else


def test_a_network_without_hf_parts_writes_none_and_never_imports_transformers(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # an import would raise ImportError
    data = {"environment": {"backend": "gym", "gym_id": "CartPole-v1"}, "training": {"algorithm": "iqn"},
            "nn": {"vis": {"no_image": True}, "float": {"mlp": {"hidden_dim": 16}},
                   "decoder": {"dense_hidden_dimension": 32}, "iqn": {"embedding_dimension": 8},
                   "training": {"use_jit": False}}}
    run = tmp_path / "run"
    _, want, folder = checkpointed(data, run)
    assert hf_folders(folder) == [] and hf_folders(run / "weights") == []
    for where in (run, folder):
        assert_starts_from(data, where, want)


def test_init_from_pretrained_names_what_a_folder_lacks(tmp_path):
    from rulka.errors import ConfigError
    from rulka.nn.pretrained import read_folder

    with pytest.raises(ConfigError, match="is not a folder"):
        read_folder(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"holds none of model\.safetensors .* policy\.safetensors .* agent\.safetensors"):
        read_folder(tmp_path)
    (tmp_path / "policy.safetensors").write_bytes(b"\x00" * 10)  # a truncated policy file
    with pytest.raises(ConfigError, match="cannot read"):
        read_folder(tmp_path)


try:  # the tiny hub models of the HF tests (skipped there and here without transformers)
    from test_nn_hf import hf_nn, hub  # noqa: F401  (a fixture)
except pytest.skip.Exception:
    def hf_nn(hub):  # pragma: no cover - only reached by skipped tests
        raise AssertionError

    @pytest.fixture
    def hub():
        pytest.skip("transformers is not installed (extra rulka[hf])")
