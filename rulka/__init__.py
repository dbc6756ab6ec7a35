"""rulka: distributed reinforcement learning for TrackMania (and any Gymnasium env) over TLS.

Importing this package has no side effects: nothing is downloaded, created or read.
"""

__version__ = "0.1.0"


def __getattr__(name: str):  # lazy: importing rulka stays free of torch and friends
    if name == "run_local":
        from rulka.local import run_local

        return run_local
    raise AttributeError(f"module 'rulka' has no attribute {name!r}")
