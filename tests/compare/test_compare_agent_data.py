"""What real agent runs need from the comparators (issue 13).

Monotone calibrations, identifier entities, omissions of dropped lines,
propagated inventions, the normalizations of what varies between runs
(action-aware PIDs included), both quoting styles of accessibility-tree names
and URLs of every scheme.
"""

from __future__ import annotations

import random

import pytest

from devsets.calibration.fit import fit_monotone_logistic
from fidelity.compare import SweComparator, TerminalComparator, WebComparator
from fidelity.compare.base import CompareContext
from fidelity.compare.calibration import DOMAIN_FEATURES, Calibration, load_calibration
from fidelity.compare.consistency import check_consistency
from fidelity.compare.entities import extract
from fidelity.compare.normalize import normalize
from fidelity.compare.web import parse_tree, tree_entities
from fidelity.trajectory import CommandAction, Observation, Step


def ctx(command: str, history: list[Step] | None = None) -> CompareContext:
    return CompareContext(action=CommandAction(command=command), history=history or [])


# -- calibration cannot run backwards --------------------------------------------------------


@pytest.mark.parametrize("domain", sorted(DOMAIN_FEATURES))
def test_shipped_calibrations_are_monotone(domain: str) -> None:
    calibration = load_calibration(domain)
    assert calibration is not None
    assert all(c >= 0 for c in calibration.coef)
    base = [0.1] * len(calibration.coef)
    p = calibration.probability(base)
    for i in range(len(base)):
        bigger = list(base)
        bigger[i] += 0.5
        assert calibration.probability(bigger) >= p


def test_a_negative_weight_is_refused() -> None:
    names = list(DOMAIN_FEATURES["terminal"])
    coef = [1.0] * len(names)
    coef[0] = -0.5
    with pytest.raises(ValueError, match=r"runs backwards: negative weight on \['line_gap'\]"):
        Calibration(domain="terminal", features=names, coef=coef, intercept=0.0, cutoff=0.5)


def test_the_fit_keeps_weights_non_negative_where_the_data_pulls_them_down() -> None:
    """A feature anti-correlated with drift gets weight 0, never a negative one."""
    rng = random.Random(3)
    x, y = [], []
    for _ in range(400):
        drift = rng.random() < 0.5
        useful = rng.uniform(0.5, 1.0) if drift else rng.uniform(0.0, 0.5)
        misleading = rng.uniform(0.0, 0.3) if drift else rng.uniform(0.5, 1.0)
        x.append([useful, misleading])
        y.append(int(drift))
    coef, _ = fit_monotone_logistic(x, y)
    assert coef[0] > 1.0
    assert coef[1] == 0.0


def test_a_whole_line_replaced_drifts_at_least_as_likely_as_one_word() -> None:
    """The swe verdict grows with the difference (it used to run backwards)."""
    comparator = SweComparator()
    real = Observation(text="ValueError: could not convert string to float: 'abc'\n", exit_code=1)
    word = Observation(text="ValueError: could not convert string to float: 'xyz'\n", exit_code=1)
    whole = Observation(text="RuntimeError: the table has no column named flux\n", exit_code=1)
    context = ctx("python reproduce.py")
    p_word = comparator.compare(real, word, context).metrics["drift_p"]
    p_whole = comparator.compare(real, whole, context).metrics["drift_p"]
    assert p_whole >= p_word


# -- entities --------------------------------------------------------------------------------


def test_identifiers_import_paths_and_node_ids_are_entities() -> None:
    text = (
        "class RST(FixedWidth):\n"
        "    def write(self, lines):\n"
        "from astropy.io.ascii import core\n"
        '  File "/testbed/astropy/io/ascii/rst.py", line 61, in write_header\n'
        "AttributeError: 'RST' object has no attribute 'header_rows'\n"
        "        self.data.to_table(names)\n"
        "astropy/io/ascii/tests/test_rst.py::test_write_header_rows PASSED\n"
    )
    found = extract(text)
    assert {
        "ident:RST",
        "ident:write",
        "import:astropy.io.ascii",
        "ident:write_header",
        "ident:header_rows",
        "ident:to_table",
        "nodeid:astropy/io/ascii/tests/test_rst.py::test_write_header_rows",
    } <= found


def test_an_invented_function_in_a_file_view_is_a_hallucination() -> None:
    real = Observation(text="    57\t    def __init__(self):\n    58\t        super().__init__()\n")
    sim = Observation(
        text="    57\t    def __init__(self):\n    58\t    def _resolve_cached(self, value):\n"
        "    59\t        super().__init__()\n"
    )
    result = TerminalComparator().compare(real, sim, ctx("nl -ba astropy/io/ascii/rst.py"))
    assert "ident:_resolve_cached" in result.hallucinations


def test_a_dropped_or_changed_line_is_an_omission_and_its_new_text_a_hallucination() -> None:
    real = Observation(
        text="Checking the header rows\nAll columns are consistent now\nDone\n", exit_code=0
    )
    dropped = Observation(text="Checking the header rows\nDone\n", exit_code=0)
    changed = Observation(
        text="Checking the header rows\nAll columns are consistent\nDone\n", exit_code=0
    )
    comparator = TerminalComparator()
    context = ctx("python check.py")
    assert (
        "line:All columns are consistent now"
        in comparator.compare(real, dropped, context).omissions
    )
    result = comparator.compare(real, changed, context)
    assert result.omissions == ["line:All columns are consistent now", "word:now"]
    assert result.hallucinations == ["line:All columns are consistent"]


def test_a_repeated_invention_is_a_hallucination_with_its_first_depth() -> None:
    comparator = TerminalComparator()
    real = [Observation(text="a.py\nb.py\n"), Observation(text="a.py\nb.py\n")]
    sim = [
        Observation(text="a.py\nb.py\nhelpers_v2.py\n"),
        Observation(text="a.py\nb.py\nhelpers_v2.py\n"),
    ]
    first = ctx("ls")
    # open loop: the model was shown its own first answer
    second = ctx("ls", [Step(action=CommandAction(command="ls"), observation=sim[0])])
    comparisons = [
        comparator.compare(r, s, c) for r, s, c in zip(real, sim, (first, second), strict=True)
    ]
    assert comparisons[1].stale == ["file:helpers_v2.py"]
    checked = check_consistency(comparator, real, sim, [first, second], comparisons)
    assert checked[0].hallucinations == ["file:helpers_v2.py"]
    assert checked[1].hallucinations == ["file:helpers_v2.py"] and checked[1].stale == []
    assert "hallucinated file:helpers_v2.py (propagated from step 1)" in checked[1].reasons
    assert checked[1].metrics["propagated"] == 1.0


def test_state_the_real_environment_showed_stays_stale() -> None:
    comparator = TerminalComparator()
    real = [Observation(text="a.py\nold.py\n"), Observation(text="a.py\n")]
    sim = [Observation(text="a.py\nold.py\n"), Observation(text="a.py\nold.py\n")]
    contexts = [
        ctx("ls"),
        ctx("rm old.py && ls", [Step(action=CommandAction(command="ls"), observation=real[0])]),
    ]
    comparisons = [comparator.compare(r, s, c) for r, s, c in zip(real, sim, contexts, strict=True)]
    checked = check_consistency(comparator, real, sim, contexts, comparisons)
    # the name is stale; the listing's line is this step's, as with ls -l's longer lines
    assert checked[1].stale == ["file:old.py"] and checked[1].hallucinations == ["line:old.py"]


# -- normalizations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "rule"),
    [
        (
            "Stored in directory: /tmp/pip-ephem-wheel-cache-07l9px25/wheels",
            "Stored in directory: /tmp/pip-ephem-wheel-cache-k1_x9qz0/wheels",
            "pip_temp",
        ),
        ("random seed:        10226200", "random seed:        2649877", "test_seed"),
        (
            "hash randomization: on (PYTHONHASHSEED=108273847)",
            "hash randomization: on (PYTHONHASHSEED=2051286573)",
            "test_seed",
        ),
        ("Using --randomly-seed=1234", "Using --randomly-seed=998877", "test_seed"),
        (
            "Set-Cookie: sessionid=abcdefgh12345678xyz; Path=/",
            "Set-Cookie: sessionid=q9w8e7r6t5y4u3i2o1p; Path=/",
            "signed_token",
        ),
        (
            "<a href='/cart?token=3f9a8b7c6d5e4f3a2b1cz'>",
            "<a href='/cart?token=zzyyxxwwvvuuttssrrq'>",
            "signed_token",
        ),
        (
            "Authorization: Bearer abcdefghijklmnopqrstu",
            "Authorization: Bearer ZYXWVUTSRQPONMLKJIHGF",
            "bearer_token",
        ),
        (
            "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpM",
            "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI5OTk5In0.AbCdEfGhIjKlMnOpQrStUv",
            "jwt",
        ),
    ],
)
def test_what_varies_between_runs_is_normalized_and_counted(
    first: str, second: str, rule: str
) -> None:
    a, counts_a = normalize(first)
    b, counts_b = normalize(second)
    assert a == b
    assert counts_a.get(rule) == 1 and counts_b.get(rule) == 1


def test_tokens_do_not_become_file_entities() -> None:
    text, _ = normalize("Set-Cookie: sessionid=abc.def-ghi_jkl.mnopq; csrftoken=Zx9.Qw8ErTy7Ui6")
    assert not any(e.startswith("file:") for e in extract(text))


def test_a_pid_is_read_from_the_action() -> None:
    for command in ("sleep 30 & echo $!", "python -c 'import os; print(os.getpid())'"):
        assert normalize("48213\n", command) == ("<PID>\n", {"action_pid": 1})
    # the same bare number from a command that does not print a PID is kept
    assert normalize("48213\n", "wc -l < big.csv") == ("48213\n", {})


def test_second_run_differences_do_not_drift() -> None:
    real = Observation(
        text="random seed:        10226200\nhash randomization: on (PYTHONHASHSEED=108273847)\n"
        "test_rst.py[4] ....                                          [OK]\n",
        exit_code=0,
    )
    sim = Observation(
        text="random seed:        2649877\nhash randomization: on (PYTHONHASHSEED=2051286573)\n"
        "test_rst.py[4] ....                                          [OK]\n",
        exit_code=0,
    )
    result = SweComparator().compare(real, sim, ctx("bin/test sympy/printing/tests/test_rst.py"))
    assert not result.drift and result.normalizations["test_seed"] == 4


# -- web: both quoting styles, every URL scheme ------------------------------------------------


def test_double_quoted_names_are_read_and_compared() -> None:
    real = "[1] RootWebArea \"Today's deals\" focused: True\n  [2] link \"Men's shoes\", url='https://shop.example/men'"
    sim = "[1] RootWebArea \"Today's deals\" focused: True\n  [2] link \"Women's shoes\", url='https://shop.example/men'"
    nodes = parse_tree(real.replace("[1] ", "").replace("[2] ", ""))
    assert [n.name for n in nodes] == ["Today's deals", "Men's shoes"]
    result = WebComparator().compare(
        Observation(text=real), Observation(text=sim), ctx("click('2')")
    )
    assert result.score < 1.0 and result.drift


def test_urls_of_every_scheme_are_entities() -> None:
    nodes = parse_tree(
        "link 'Mail us', url='mailto:help@shop.example'\n"
        "link 'Local', url='file:///srv/docs/index.html'\n"
        "link 'Blank', url='about:blank'"
    )
    assert {
        "url:mailto:help@shop.example",
        "url:file:///srv/docs/index.html",
        "url:about:blank",
    } <= tree_entities(nodes)
