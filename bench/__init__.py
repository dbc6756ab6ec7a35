"""rulka's benchmark suite: each ``bench/<name>.py`` prints one JSON object on stdout;
``python -m bench`` runs them all and rewrites BENCHMARKS.md. Not part of the installed package."""
