"""Fakes the tests and the benchmarks share, for what cannot run here or to inject failures.

- :mod:`fakes.world_model`: a real loopback HTTP server speaking the OpenAI-compatible
  API, whose answers a test scripts (429s, 5xx, timeouts, garbage, slow drips);
- :mod:`fakes.trajectories`: small trajectories built in code.

Not part of the package (``fidelity/``): the benchmarks import these instead of the tests.
"""
