"""Defaults that several modules share, each written once.

The library's configs and the command line's options read them from here, so a
default changes in one place. The module imports nothing: the command line shows
these values in its help before it loads anything that uses them.
"""

from __future__ import annotations

DEFAULT_DB = "fidelity.duckdb"
"""The DuckDB file holding every run (``--db``; :class:`fidelity.store.Store`)."""

DEFAULT_REPORT = "report.html"
"""The HTML report ``fidelity audit`` and ``fidelity report`` write (``--report``, ``-o``)."""

MAX_TOKENS = 32768
"""Tokens one world-model or judge answer may hold (``--max-tokens``): Qwen-AgentWorld's
model card and the reference script's, as long reasoning comes first."""

TOP_K = 20
"""``top_k`` sent to a world-model endpoint (``--top-k``): the model card's sampling."""

REQUEST_DEADLINE = 300.0
"""Seconds one world-model or judge request may take in all: attempts, backoff waits and
a dripping answer included (``--sim-timeout``)."""

REQUEST_TIMEOUT = 120.0
"""Seconds one attempt of a world-model or judge request may take."""

MAX_RETRIES = 4
"""Retries of a failed world-model or judge request."""

SIM_CONCURRENCY = 16
"""World-model predictions in flight at once (``--sim-concurrency``)."""

JUDGE_CONCURRENCY = 8
"""Judge requests in flight at once (``fidelity judge --concurrency``)."""

STEP_TIMEOUT = 30.0
"""Seconds one real step may take (``--timeout``; every sandbox backend's ``step_timeout``)."""

SANDBOX_CONCURRENCY = 2
"""Sandboxes running at once for a replay or a dataset gate (``--concurrency``); an audit
runs one per core."""

OBSERVATION_CAP = 64 * 1024
"""Characters stored per observation text, real and simulated alike (``--observation-cap``);
the comparator cuts a longer one and flags it truncated."""
