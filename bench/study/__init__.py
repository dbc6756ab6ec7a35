"""The seed-study tool: is a learning recipe reliable, judged by seeds and by what the user runs
(lesson 12)? One command, three kinds of study over shared parts, and a re-judge of their health:

- ``python -m bench.study runs``: several ``rulka run``s of one config per arm, as a user runs
  it (``runs``: first finish, best and final greedy races, divergence; records to
  ``bench/history/run_studies.json``);
- ``python -m bench.study recipe``: the same recipe in one process per seed, without network or
  threads, so that a seed repeats exactly (``recipe``; records to
  ``bench/history/recipe_studies.json``);
- ``python -m bench.study tracks``: what a trained policy drives, track by track, against the
  scripted driver (``tracks``; records to ``bench/history/track_results.json``), the races the
  other two use;
- ``python -m bench.study health``: a recorded ``runs`` study's divergence flags judged anew from its
  worst window means, by an environment's own bounds (``--q-limit``: CartPole at gamma 0.99, 150;
  the td_loss and grad_norm bounds scale with it).

``python -m bench --rewrite`` renders the records in BENCHMARKS.md's targets and in
``bench/history/README.md``.
"""
