"""The compiled modules; everything else is in pyproject.toml.

``fidelity.compare._fastnorm`` runs the line-local built-in normalization rules and
``fidelity.compare._fastentities`` the entity regex (the regexes in ``rules.py``
and ``entities.py`` stay the reference, and the tests compare both ways).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"fidelity.compare.{name}",
            [f"fidelity/compare/{name}.c"],
            # the helpers both modules include: an edit of it rebuilds both, and the sdist
            # carries it (so does pyproject.toml's package-data)
            depends=["fidelity/compare/_textscan.h"],
            extra_compile_args=["-O2"],
        )
        for name in ("_fastnorm", "_fastentities")
    ]
)
