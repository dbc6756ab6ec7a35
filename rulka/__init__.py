"""rulka: distributed reinforcement learning for TrackMania (and any Gymnasium env) over TLS.

Importing this package registers the built-in simulator with Gymnasium as ``rulka/SimTrack-v0``
and ``rulka/SimTrackAnalog-v0`` (entries in gymnasium's registry: nothing is built, read,
downloaded or created, and torch is not imported), so both of these work::

    import gymnasium as gym
    import rulka
    env = gym.make("rulka/SimTrack-v0", track="hairpins")
    env = gym.make("rulka:rulka/SimTrackAnalog-v0")  # gymnasium imports rulka itself
"""

__version__ = "0.1.0"

from rulka import envs as _envs  # noqa: E402,F401 - registers rulka/SimTrack-v0 with gymnasium


def __getattr__(name: str):  # lazy: importing rulka stays free of torch and friends
    if name == "run_local":
        from rulka.local import run_local

        return run_local
    raise AttributeError(f"module 'rulka' has no attribute {name!r}")
