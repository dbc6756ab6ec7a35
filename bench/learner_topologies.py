"""Benchmark: the guide's network catalogue (``bench/learner.py --topologies``): IQN training
batches/s and samples/s at batch 512 for each fusion topology, the plain CNN (``cnn_none_48x36``)
first as the baseline of the same run.

    python -m bench.learner_topologies [--seconds S]   # or: python -m bench --only learner_topologies
"""

from __future__ import annotations

import sys

from bench import learner

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "--topologies", *sys.argv[1:]]
    learner.main()
