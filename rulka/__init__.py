"""rulka: distributed reinforcement learning for TrackMania (and any Gymnasium env) over TLS.

Importing this package has no side effects: nothing is downloaded, created or read.
"""

__version__ = "0.1.0"
