"""The built-in track simulator: a TrackMania-like car on flat tracks with surfaces and walls.

- ``tracks``: track descriptions (bundled JSON, generator) rasterised into material maps;
- ``physics``: the car (10 ms ticks, engine and gears, grip per surface, walls);
- ``camera``: a grayscale first-person view;
- ``driver``: a scripted driver that sets each track's reference time;
- ``env``: the Gymnasium env ``rulka/SimTrack-v0`` (same actions, observations and rewards as
  the TrackMania backends, through the shared pipeline);
- ``rt``: an rtgym interface that runs the same sim in real time.

Importing this package does not build any track (tracks are built on first use).
"""
