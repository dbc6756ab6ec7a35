"""The README's figures, generated from the targets so that there is one source of numbers: the
learner table and "What it got" are rows of the targets table (``bench.targets.target_rows``).
``python -m bench`` rewrites both blocks whenever it writes BENCHMARKS.md; ``tests/test_readme.py``
checks that the README holds what they render now."""

from __future__ import annotations

from collections.abc import Sequence

Row = tuple[str, str, str, str, "bool | None"]

# (learner, its recipes in configs/, the targets whose figures its row quotes: goals' beginnings)
LEARNERS: list[tuple[str, str, tuple[str, ...]]] = [
    ("IQN with mini-races, the default (`iqn`)",
     "`sim_iqn.yaml`, `sim_iqn_cycle.yaml` (five tracks), `cartpole_iqn.yaml`, `cartpole_simple.yaml` "
     "(a tiny DQN, plumbing check)",
     ("`configs/sim_iqn.yaml` as the README runs it", "`configs/sim_iqn_cycle.yaml` as a user runs it")),
    ("PPO (`ppo`)", "`sim_ppo.yaml`, `cartpole_ppo.yaml`", ("sim ppo finishes the default track",)),
    ("GRPO (`grpo`)", "`sim_grpo.yaml`, `cartpole_grpo.yaml`", ("sim grpo finishes the default track",)),
    ("DPO (`dpo`), online pairs within a start, or offline from `rulka dpo pair`",
     "`sim_dpo.yaml`, `cartpole_dpo.yaml`", ("cartpole dpo beyond random",)),
    ("SAC (`sac`), continuous actions", "`sim_sac.yaml`, `pendulum_sac.yaml`",
     ("sac analog finishes the default track", "SAC reaches a mean return of -200")),
    ("REDQ (`sac` with 10 critics)", "`sim_redq.yaml` (sized for a CPU learner)",
     ("redq analog finishes the default track",)),
]
MAIN_RUN = "`configs/sim_iqn.yaml` as the README runs it"  # the README's own command (lesson 12)
BLOCKS = ("learners", "what-it-got")


def _quoted(rows: Sequence[Row], starts: Sequence[str]) -> list[Row]:
    return [row for start in starts for row in rows if row[1].startswith(start)]


def _cell(row: Row) -> str:
    verdict = {True: "holds", False: "**does not hold**", None: "not measured"}[row[4]]
    return f"{row[1]}: {row[2]} ({row[3][:10]}, {verdict})".replace("|", "/")


def render_blocks(rows: Sequence[Row]) -> dict[str, str]:
    """The text of each generated block, from the target rows."""
    table = ["| learner (`training.algorithm`) | recipes in `configs/` | measured (targets in BENCHMARKS.md) |",
             "|---|---|---|"]
    for learner, recipes, starts in LEARNERS:
        quoted = _quoted(rows, starts)
        table.append(f"| {learner} | {recipes} | {'; '.join(_cell(r) for r in quoted) or 'no target yet'} |")
    main = _quoted(rows, (MAIN_RUN,))
    got = (f"What it got ({_cell(main[0])}; the study's every run: `bench/history/README.md`, "
           "\"Repeated runs\")." if main else "What it got: not measured yet.")
    return {"learners": "\n".join(table), "what-it-got": got}


def update_readme(text: str, rows: Sequence[Row]) -> str:
    """``text`` (the README) with each ``<!-- bench:NAME:begin -->`` ... ``:end -->`` block rendered anew."""
    for name, body in render_blocks(rows).items():
        begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
        head, found, rest = text.partition(begin)
        _, found_end, tail = rest.partition(end)
        if not found or not found_end:
            raise ValueError(f"README.md has no {begin} ... {end} block")
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    return text
