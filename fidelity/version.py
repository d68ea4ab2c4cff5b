"""The version of fidelity (its own module: every part may import it without a circle)."""

__version__ = "0.1.0"
