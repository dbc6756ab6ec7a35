"""Generic replay storage shared by the learners.

- ``FrameStore`` (``frames``): every observation stored once, addressed by serial number;
- ``EpisodeStitcher`` (``episodes``): joins the segments of an episode, holding back the steps
  whose n-step future has not arrived yet;
- ``build_n_step`` (``nstep``): n-step reward sums, cut at exploratory actions when asked;
- ``SumTree`` (``sumtree``): prioritized sampling;
- ``ChunkStore``, ``write_replay``, ``read_replay`` (``files``): a memory's files without pickle,
  as content-addressed chunks that checkpoints share (only changed chunks are written) or one npz;
- ``UniformReplayMemory`` (``uniform``): uniform replay for SAC/REDQ and any off-policy learner
  without mini-races (memory plugin ``"uniform"``).

The IQN mini-race memory lives with its agent: ``rulka.agents.iqn.replay``.
"""

from rulka.memory.episodes import EpisodeStitcher, Stretch
from rulka.memory.frames import FrameStore
from rulka.memory.nstep import NO_FINISH, build_n_step
from rulka.memory.uniform import TransitionBatch, UniformReplayMemory

__all__ = ["NO_FINISH", "EpisodeStitcher", "FrameStore", "Stretch", "TransitionBatch", "UniformReplayMemory",
           "build_n_step"]
