"""Calibrated drift verdicts: a monotone logistic regression over a comparison's features.

Every feature is a difference (a gap, a count of mismatches or entities) and
every weight is non-negative, so the drift probability never falls when a
difference grows; a calibration file with a negative weight is refused.

The fitted parameters of a domain ship as ``<domain>.json`` next to this
module; this package only loads and applies them (:mod:`.apply`). The dev-set
builders and the fitting code are not shipped: they live in the repository's
``devsets/calibration/`` and run from ``benchmarks/``. Each file was made by
(``README.md`` here says more)::

    python benchmarks/agent_devset.py --domain terminal --write   # terminal.json
    python benchmarks/agent_devset.py --domain swe --write        # swe.json
    python benchmarks/web_devset.py --write                       # web.json
    python benchmarks/calibrate_tools.py --domain mcp             # mcp.json
    python benchmarks/calibrate_tools.py --domain search          # search.json
    python benchmarks/calibrate_os.py A.jsonl B.jsonl --write     # os.json

A domain without a file keeps its fixed score threshold.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fidelity.compare.base import StepComparison
from fidelity.compare.entities import invented

FEATURES = (
    "line_gap",
    "token_gap",
    "char_gap",
    "exit_mismatch",
    "hallucinated",
    "omitted",
    "stale",
    "lines_changed",
    "changed_share",
    "chars_changed",
    "order_gap",
)
"""Feature names, in the order of :func:`features` (gaps are ``1 - similarity``); then the
amount of difference (:func:`fidelity.compare.textdiff.amount`: changed lines and characters
as ``log1p``, the changed-line share as is), so one changed line among hundreds and a
rewritten output need not get one probability; last, the share of the lines both sides hold
once that are out of order (:func:`fidelity.compare.textdiff.reordered`: a reordered but
equal listing changes no line)."""

WEB_FEATURES = (
    "score_gap",
    "precision_gap",
    "recall_gap",
    "tree_gap",
    "prop_gap",
    "prop_mismatches",
    "nodes_changed",
    "hallucinated",
    "omitted",
    "stale",
)
"""Features of the web domain: node overlap, tree and property gaps, entity counts.

Counts (mismatched properties, nodes on one side only, entities) enter as ``log1p``.
"""

SWE_FEATURES = (
    *FEATURES,
    "diff_file_gap",
    "hunk_gap",
    "test_gap",
    "tests_flipped",
)
"""Features of the swe domain: the terminal ones (with the amount of difference: long tool
outputs make one wrong line a tiny gap) and the repository-state gaps."""

MCP_FEATURES = (
    "score_gap",
    "key_gap",
    "type_gap",
    "value_gap",
    "length_gap",
    "line_gap",
    "token_gap",
    "exit_mismatch",
    "hallucinated",
    "omitted",
    "stale",
)
"""Features of the mcp domain: the JSON comparator's gaps (key paths, types, values, array
lengths), the text gaps when a side is not JSON, the isError flip, entity counts."""

SEARCH_FEATURES = (
    "score_gap",
    "url_gap",
    "title_gap",
    "rank_gap",
    "snippet_gap",
    "fields_changed",
    "line_gap",
    "token_gap",
    "hallucinated",
    "omitted",
    "stale",
)
"""Features of the search domain: result URL overlap, titles, rank order, snippets, the
count of changed fields of shared results (``log1p``), the text gaps (pages, memory
answers), entity counts."""


OS_FEATURES = (
    "precision_gap",
    "recall_gap",
    "text_gap",
    "geometry_gap",
    "state_gap",
    "text_mismatches",
    "geometry_mismatches",
    "nodes_changed",
)
"""Features of the os domain (OSWorld trees, :mod:`fidelity.compare.osworld`): node overlap,
text, geometry and state agreement of matched nodes; counts enter as ``log1p``."""

DOMAIN_FEATURES: dict[str, tuple[str, ...]] = {
    "terminal": FEATURES,
    "web": WEB_FEATURES,
    "swe": SWE_FEATURES,
    "mcp": MCP_FEATURES,
    "search": SEARCH_FEATURES,
    "os": OS_FEATURES,
}
"""Feature names per calibrated domain (other domains use the terminal ones)."""


def feature_names(domain: str) -> tuple[str, ...]:
    """The feature names of *domain*."""
    return DOMAIN_FEATURES.get(domain, FEATURES)


def comparison_vector(domain: str, comparison: StepComparison) -> list[float]:
    """The feature vector of *domain* (see :data:`DOMAIN_FEATURES`) for an uncalibrated verdict."""
    m = comparison.metrics
    counts = [
        math.log1p(invented(comparison.hallucinations)),
        math.log1p(len(comparison.omissions)),
        math.log1p(len(comparison.stale)),
    ]
    if domain == "os":
        return _os_vector(m)
    if domain == "web":
        gaps = ("node_precision", "node_recall", "tree_sim", "prop_agreement")
        return [
            1.0 - comparison.score,
            *(1.0 - m.get(name, 1.0) for name in gaps),
            math.log1p(m.get("prop_mismatches", 0.0)),
            math.log1p(m.get("nodes_changed", 0.0)),
            *counts,
        ]
    if domain in {"mcp", "search"}:
        return _tool_vector(domain, comparison, counts)
    terminal = [*(1.0 - m.get(n, 1.0) for n in ("line_sim", "token_sim", "char_sim"))]
    terminal += [1.0 if comparison.exit_match is False else 0.0, *counts, *_amount(m)]
    if domain != "swe":
        return terminal
    repo = ("diff_file_f1", "hunk_sim", "test_agreement")
    return [
        *terminal,
        *(1.0 - m.get(name, 1.0) for name in repo),
        math.log1p(m.get("tests_flipped", 0.0)),
    ]


def _amount(m: dict[str, float]) -> list[float]:
    """The amount-of-difference and order features of one comparison's metrics (see
    :data:`FEATURES`)."""
    return [
        math.log1p(m.get("lines_changed", 0.0)),
        m.get("changed_share", 0.0),
        math.log1p(m.get("chars_changed", 0.0)),
        m.get("order_gap", 0.0),
    ]


def _tool_vector(domain: str, comparison: StepComparison, counts: list[float]) -> list[float]:
    """The mcp / search vector (:data:`MCP_FEATURES`, :data:`SEARCH_FEATURES`)."""
    m = comparison.metrics
    text = [1.0 - m.get(name, 1.0) for name in ("line_sim", "token_sim")]
    if domain == "search":
        names = ("url_f1", "title_sim", "rank_corr", "snippet_sim")
        gaps = [1.0 - m.get(name, 1.0) for name in names]
        changed = math.log1p(m.get("fields_changed", 0.0))
        return [1.0 - comparison.score, *gaps, changed, *text, *counts]
    gaps = [1.0 - m.get(n, 1.0) for n in ("key_f1", "type_agreement", "value_agreement")]
    gaps.append(1.0 - m.get("length_agreement", 1.0))
    exit_gap = 1.0 if comparison.exit_match is False else 0.0
    return [1.0 - comparison.score, *gaps, *text, exit_gap, *counts]


def _os_vector(m: dict[str, float]) -> list[float]:
    """The :data:`OS_FEATURES` of one comparison's metrics."""
    agreements = (
        "node_precision",
        "node_recall",
        "text_agreement",
        "geometry_agreement",
        "state_agreement",
    )
    counts = ("text_mismatches", "geometry_mismatches", "nodes_changed")
    return [
        *(1.0 - m.get(name, 1.0) for name in agreements),
        *(math.log1p(m.get(name, 0.0)) for name in counts),
    ]


def features(
    metrics: dict[str, float],
    exit_match: bool | None,
    hallucinated: int,
    omitted: int,
    stale: int,
) -> list[float]:
    """The feature vector of one comparison (see :data:`FEATURES`)."""
    return [
        1.0 - metrics.get("line_sim", 1.0),
        1.0 - metrics.get("token_sim", 1.0),
        1.0 - metrics.get("char_sim", 1.0),
        1.0 if exit_match is False else 0.0,
        math.log1p(hallucinated),
        math.log1p(omitted),
        math.log1p(stale),
        *_amount(metrics),
    ]


class Calibration(BaseModel):
    """Fitted logistic regression of one domain: drift when the probability reaches ``cutoff``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str
    features: list[str]
    coef: list[float]
    intercept: float
    cutoff: float = Field(gt=0.0, lt=1.0)
    fit: dict[str, float | int | str] = Field(
        default_factory=dict, description="provenance and held-out figures of the fit"
    )

    @model_validator(mode="after")
    def _shape(self) -> Calibration:
        names = feature_names(self.domain)
        if list(self.features) != list(names) or len(self.coef) != len(names):
            raise ValueError(f"calibration of {self.domain!r} does not match its features {names}")
        backwards = [n for n, c in zip(names, self.coef, strict=True) if c < 0]
        if backwards:
            raise ValueError(
                f"calibration of {self.domain!r} runs backwards: negative weight on {backwards} "
                "(a larger difference would lower the drift probability)"
            )
        return self

    def probability(self, vector: list[float]) -> float:
        """Drift probability of a feature vector."""
        z = self.intercept + sum(c * x for c, x in zip(self.coef, vector, strict=True))
        if z < -60:
            return 0.0
        return 1.0 / (1.0 + math.exp(-z))

    def decide(
        self, comparison: StepComparison, hard: list[str], findings: list[str]
    ) -> StepComparison:
        """*comparison* with drift decided by this calibration instead of fixed rules.

        Drift when a *hard* mismatch was found or the drift probability (stored
        as the ``drift_p`` metric) reaches the cutoff; the reasons are then the
        hard mismatches, the probability and the *findings* (soft mismatches,
        entities), else none.
        """
        p = self.probability(comparison_vector(self.domain, comparison))
        fired = [f"drift probability {p:.2f} >= {self.cutoff:.2f}"] if p >= self.cutoff else []
        reasons = [*hard, *fired, *findings] if hard or fired else []
        return comparison.model_copy(
            update={
                "drift": bool(reasons),
                "metrics": {**comparison.metrics, "drift_p": p},
                "reasons": reasons,
            }
        )


@lru_cache(maxsize=16)
def load_calibration(domain: str) -> Calibration | None:
    """The shipped calibration of *domain*, or None when it has none."""
    source = resources.files(__package__).joinpath(f"{domain}.json")
    if not source.is_file():
        return None
    return Calibration.model_validate(json.loads(source.read_text(encoding="utf-8")))
