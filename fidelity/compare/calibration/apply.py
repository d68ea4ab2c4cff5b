"""Which verdict a comparator uses: a fixed threshold, or its domain's shipped calibration."""

from __future__ import annotations

from fidelity.compare.base import StepComparison
from fidelity.compare.calibration import Calibration, load_calibration
from fidelity.compare.config import CompareConfig


def calibration_for(
    domain: str, threshold: float | None, config: CompareConfig, enabled: bool = True
) -> Calibration | None:
    """The shipped calibration of *domain*, or None when the comparator keeps a fixed threshold.

    The threshold is fixed when one is given explicitly or in the compare
    config's ``[thresholds]`` table, or when *enabled* is False (the
    uncalibrated comparator that calibration scripts fit on); otherwise the
    domain's ``calibration/<domain>.json`` decides (None when it has none).
    """
    fixed = threshold is not None or domain in config.thresholds
    return load_calibration(domain) if enabled and not fixed else None


def calibrated(calibration: Calibration | None, comparison: StepComparison) -> StepComparison:
    """*comparison* with drift decided by *calibration* (see :func:`calibration_for`), if any.

    For comparators that compute their metrics and fixed-rule verdict first
    (mcp, search). Infrastructure failures keep their verdict. The fixed
    rules' reasons stay hard (a type change or a missing key the development
    set never shows still drifts); the calibration adds the steps whose drift
    probability reaches its cutoff, so it can only make the verdict stricter.
    """
    if calibration is None or comparison.infra_failure:
        return comparison
    return calibration.decide(comparison, list(comparison.reasons), [])
