"""The one compiled module, ``fidelity.compare._fastnorm``; everything else is in pyproject.toml.

It runs the line-local built-in normalization rules (the regexes in
``fidelity/compare/normalize.py`` stay the reference, and the tests compare both).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "fidelity.compare._fastnorm",
            ["fidelity/compare/_fastnorm.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
