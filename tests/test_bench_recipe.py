"""bench/study/recipe.py: a seed gives the same run twice (the point of studying recipes in-process), and
the run follows the trainer's rate limiter (no updates before the start size, then the ratio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.study import recipe

CARTPOLE = str(Path(__file__).resolve().parents[1] / "configs" / "cartpole_iqn.yaml")


@pytest.mark.slow
def test_a_seed_repeats_and_holds_the_ratio():
    a = recipe.run_seed(CARTPOLE, [], 3, 2500, 1200, 2, "475")
    b = recipe.run_seed(CARTPOLE, [], 3, 2500, 1200, 2, "475")
    c = recipe.run_seed(CARTPOLE, [], 4, 2500, 1200, 2, "475")
    strip = lambda run: [{k: v for k, v in row.items() if k != "minutes"} for row in run["history"]]  # noqa: E731
    assert strip(a) == strip(b) and a["updates"] == b["updates"]
    assert strip(a) != strip(c)
    # the file's start size (1000), samples per insert (memory.number_times_single_memory_is_used_before_discard)
    # and batch (64): updates follow the ratio, no burst at the start
    from rulka.config import load_config

    cfg = load_config(CARTPOLE)
    start = int(cfg.memory.memory_size_schedule[0][1][1])
    spi, batch = int(cfg.memory.number_times_single_memory_is_used_before_discard), int(cfg.training.batch_size)
    assert (start, batch) == (1000, 64)
    trainable = a["frames"] * 0.95  # about 5% of transitions go to the held-out test store
    assert a["updates"] == pytest.approx((trainable - start) * spi / batch, rel=0.1)
    # Reverb's window: ahead by at most the error buffer (Acme's default, 0.1 x spi x start); a
    # burst (the start size's worth at once) would be start x spi / batch updates (250 at 16)
    first = a["history"][0]
    assert first["updates"] <= ((first["frames"] - start) * spi + 0.1 * spi * start) / batch + 1


def _race(finished: bool, t: float | None = None, m: float = 617.0) -> dict:
    return {"finished": finished, "race_time_s": t, "progress_m": m, "return": 1.0}


def test_track_table_has_first_finish_final_and_best_per_track():
    history = [
        {"frames": 10_000, "tracks": {"a": _race(False, m=100.0), "b": _race(False, m=50.0)}},
        {"frames": 20_000, "tracks": {"a": _race(True, 25.0), "b": _race(False, m=80.0)}},
        {"frames": 30_000, "tracks": {"a": _race(True, 22.0), "b": _race(True, 30.0)}},
        {"frames": 40_000, "tracks": {"a": _race(True, 24.0), "b": _race(False, m=20.0)}},
    ]
    table = recipe._track_table(history, ["a", "b"], {"a": 22.84, "b": 29.0})
    assert table["a"] == {"first_finish_frames": 20_000, "final_s": 24.0, "final_m": 617.0, "best_s": 22.0,
                          "scripted_s": 22.84, "best_beats_scripted": True, "final_beats_scripted": False}
    assert table["b"]["first_finish_frames"] == 30_000 and table["b"]["final_s"] is None
    assert table["b"]["final_m"] == 20.0 and table["b"]["best_s"] == 30.0 and not table["b"]["best_beats_scripted"]
    line = recipe._seed_line({"seed": 1, "reached_at_frames": 30_000, "tracks": table, "diverged": None})
    assert line.startswith("seed 1: at 30000 [a first 20000, final 24.0 s, best 22.0 s (scripted 22.84)")


def test_divergence_is_a_window_mean_over_its_threshold():
    w = recipe._Window()
    for q, g in ((5.0, 2000.0), (5.0, 10.0), (6.0, 10.0)):  # one large early gradient: not diverged
        w.add({"charts/q_mean": q, "losses/td_loss": 0.5, "losses/grad_norm": g})
    row = w.row()
    assert row["diverged"] == [] and row["grad_norm_max"] == 2000.0 and row["q_mean_mean"] == round(16 / 3, 3)
    assert w.values == {"q_mean": [], "td_loss": [], "grad_norm": []}  # a new window
    for q in (100.0, 119.0):  # the map-cycle run that diverged: q_mean 5 -> 119, grad_norm 1.6k
        w.add({"charts/q_mean": q, "losses/td_loss": 0.5, "losses/grad_norm": 1600.0})
    assert w.row()["diverged"] == ["q_mean", "grad_norm"]
    # --q-limit: CartPole's healthy Q (~100 at gamma 0.99) is under a limit of 150, and the other bounds
    # scale with it (x3: grad norms of 1,600 are CartPole's healthy scale, 3,500 are not)
    w = recipe._Window(q_limit=150.0)
    for q in (100.0, 119.0):
        w.add({"charts/q_mean": q, "losses/td_loss": 0.5, "losses/grad_norm": 1600.0})
    assert w.row()["diverged"] == []
    for q in (100.0, 119.0):
        w.add({"charts/q_mean": q, "losses/td_loss": 0.5, "losses/grad_norm": 3500.0})
    assert w.row()["diverged"] == ["grad_norm"]


def test_the_best_evaluation_is_ranked_as_the_trainer_ranks_its_best_policy():
    two = {"frames": 1, "tracks": {"a": _race(True, 30.0), "b": _race(True, 30.0)}}
    one_fast = {"frames": 2, "tracks": {"a": _race(True, 10.0), "b": _race(False, m=600.0)}}
    faster = {"frames": 3, "tracks": {"a": _race(True, 29.0), "b": _race(True, 30.0)}}
    assert sorted([one_fast, two, faster], key=recipe._rank) == [faster, two, one_fast]
    assert recipe._rank({"return": 500.0}) < recipe._rank({"return": 499.0})  # a gym env: the return
    # with the scripted driver's times as references: more tracks beaten first, whatever the total
    ref = {"a": 25.0, "b": 29.5}
    beats_b = {"frames": 4, "tracks": {"a": _race(True, 31.0), "b": _race(True, 29.0)}}  # 60 s, beats b
    assert recipe._rank(beats_b, ref) < recipe._rank(faster, ref) and recipe._rank(faster) < recipe._rank(beats_b)
