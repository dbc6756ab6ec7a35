"""TrackMania Nations Forever through TMInterface 2 and rulka's own plugin.

- ``protocol``: the plugin's message set (ids, byte layouts), both directions;
- ``state``: simulation-state blobs <-> ``CarState``;
- ``client``: ``TMIClient``, the socket with bounded reads and timeouts;
- ``game``: launching / attaching to a game instance, handshake, restarts, instance slots;
- ``frames``: BGRA frames -> grayscale images;
- ``env``: ``TmnfEnv``, the Gymnasium env (env plugin ``tmnf``);
- ``fake``: a fake game (the simulator behind the same socket and messages) with failure modes;
- ``plugin/``: rulka's TMInterface AngelScript plugin (``rulka tm install-plugin`` copies it).

Importing this package imports nothing heavy.
"""
