"""Random-crop augmentation of replayed images (performance.apply_randomcrop_augmentation)."""

from __future__ import annotations

import numpy as np
import pytest

from rulka.agents.iqn.replay import ReplayBatch
from rulka.config import RulkaConfig
from rulka.config.built import check_built
from rulka.config.loader import config_from_dict
from rulka.memory.augment import RandomCrop, shift_images
from rulka.trainer.learner_step import LearnerStep
from rulka.trainer.state import RunState, Window


def _grid() -> np.ndarray:
    # a 3x4 image whose pixel (y, x) is 10*y + x, so every moved pixel says where it came from
    return (10 * np.arange(3)[:, None] + np.arange(4)[None, :]).astype(np.uint8)


def test_shift_by_hand() -> None:
    img = _grid()[None, None]  # (B=1, C=1, 3, 4)
    # dy = +1, dx = -1: pad by 1 (edge) and crop at offset (2, 0)
    out = shift_images(img, np.array([1]), np.array([-1]))[0, 0]
    expected = np.array([[10, 10, 11, 12],
                         [20, 20, 21, 22],
                         [20, 20, 21, 22]], dtype=np.uint8)
    np.testing.assert_array_equal(out, expected)
    # replayed frames without a channel axis, (B, H, W), move the same way
    np.testing.assert_array_equal(shift_images(_grid()[None], np.array([1]), np.array([-1]))[0], expected)
    # no shift is the identity; the dtype and shape are kept
    same = shift_images(img, np.array([0]), np.array([0]))
    assert same.dtype == np.uint8 and same.shape == img.shape
    np.testing.assert_array_equal(same, img)


def test_shift_equals_pad_and_crop() -> None:
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 255, size=(6, 2, 5, 7), dtype=np.uint8)
    n = 2
    dy, dx = rng.integers(-n, n + 1, size=6), rng.integers(-n, n + 1, size=6)
    out = shift_images(imgs, dy, dx)
    for b in range(6):
        padded = np.pad(imgs[b], ((0, 0), (n, n), (n, n)), mode="edge")
        i, j = dy[b] + n, dx[b] + n
        np.testing.assert_array_equal(out[b], padded[:, i:i + 5, j:j + 7])


def _batch(b: int = 64) -> ReplayBatch:
    img = np.broadcast_to(_grid(), (b, 1, 3, 4)).copy()
    return ReplayBatch(state_img=img, state_float=np.zeros((b, 2), np.float32), action=np.zeros(b, np.int64),
                       reward=np.zeros(b, np.float32), next_img=img + 100, next_float=np.zeros((b, 2), np.float32),
                       gamma=np.ones(b, np.float32), weights=np.ones(b, np.float32), slots=np.arange(b))


def test_random_crop_same_shift_for_state_and_next_state_and_per_item() -> None:
    batch = _batch()
    out = RandomCrop(1, seed=3)(batch)
    assert out is not batch and batch.state_img[0, 0, 0, 0] == 0  # the sampled batch is not written to
    np.testing.assert_array_equal(out.next_img, out.state_img + 100)  # one shift per item for both
    # the top-left pixel tells each item's shift: 10 * clip(dy) + clip(dx); several items differ
    corners = {int(v) for v in out.state_img[:, 0, 0, 0]}
    assert len(corners) > 1 and corners <= {0, 1, 10, 11}
    # floats, actions and the rest are untouched
    assert out.state_float is batch.state_float and out.slots is batch.slots


def test_no_images_or_zero_margin_is_unchanged() -> None:
    batch = _batch()
    assert RandomCrop(0)(batch) is batch
    no_img = ReplayBatch(state_img=None, state_float=batch.state_float, action=batch.action, reward=batch.reward,
                         next_img=None, next_float=batch.next_float, gamma=batch.gamma, weights=batch.weights,
                         slots=batch.slots)
    assert RandomCrop(2)(no_img) is no_img
    with pytest.raises(ValueError):
        RandomCrop(-1)


def test_config_turns_it_on_and_validates() -> None:
    assert RandomCrop.for_config(RulkaConfig()) is None
    cfg = config_from_dict({"performance": {"apply_randomcrop_augmentation": True,
                                                      "n_pixels_to_crop_on_each_side": 3}})
    check_built(cfg)  # no longer refused
    crop = RandomCrop.for_config(cfg)
    assert crop is not None and crop.n == 3


class _Memory:
    start_learning_size = 0

    def __init__(self) -> None:
        self.batch = _batch(8)

    def __len__(self) -> int:
        return 100

    def ready(self) -> bool:
        return False

    def sample(self, n: int) -> ReplayBatch:
        return self.batch


class _Agent:
    batch_size = 8

    def __init__(self) -> None:
        self.seen: list[ReplayBatch] = []

    def train(self, batch: ReplayBatch) -> dict:
        self.seen.append(batch)
        return {}


def test_learner_step_trains_on_the_augmented_batch() -> None:
    memory, agent = _Memory(), _Agent()
    step = LearnerStep(RunState(), Window(), agent, memory, None, lambda: 0, batch_size=8, publish_every=100,
                       slice_s=1.0, augment=lambda b: RandomCrop(2, seed=0)(b))
    assert step.train_once()
    trained = agent.seen[0]
    assert trained is not memory.batch
    assert not np.array_equal(trained.state_img, memory.batch.state_img)


def test_trainer_wires_the_configured_crop_into_its_learner_step():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from roles_helpers import CountingAgent, ListMemory

    from rulka.net.local import LocalHub
    from rulka.trainer.trainer import Trainer

    key = Ed25519PrivateKey.generate()
    off = Trainer(None, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=key)
    assert off.learner.augment is None
    cfg = config_from_dict({"performance": {"apply_randomcrop_augmentation": True, "n_pixels_to_crop_on_each_side": 4}})
    on = Trainer(cfg, LocalHub().trainer_link(), agent=CountingAgent(), memory=ListMemory(), signing_key=key)
    assert isinstance(on.learner.augment, RandomCrop) and on.learner.augment.n == 4
