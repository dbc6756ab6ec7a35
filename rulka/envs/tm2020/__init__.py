"""TrackMania 2020 backend: rulka's Openplanet plugin, screen capture, a virtual gamepad and
rtgym's real-time loop, feeding the shared observation/reward pipeline (docs/tm2020.md).

Modules: ``telemetry`` (wire format, reconnecting client), ``plugin/`` (the Openplanet plugin,
package data), ``capture`` (window capture, image and LIDAR conversion), ``control`` (gamepad,
keyboard, neutral on exit), ``interface`` (rtgym interface), ``env`` (the env workers run),
``fake`` (the fake game for tests and CI), ``tools`` (install, check, record a reference line).
Nothing Windows-only is imported until a capture or a controller is built.
"""
