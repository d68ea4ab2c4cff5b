"""TerminalComparator: scores, drift, hallucinations, omissions, stale entities."""

from __future__ import annotations

import random

import pytest
from compare_samples import OUTPUTS, Run, context, ls_la_output, obs

from fidelity.compare import TerminalComparator
from fidelity.compare.terminal import DEFAULT_THRESHOLD, entity_diff, similarity
from fidelity.trajectory import KeystrokesAction, Observation


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_identical_observations_score_one(comparator: TerminalComparator, name: str) -> None:
    command, render = OUTPUTS[name]
    text = render(Run(1))
    result = comparator.compare(obs(text), obs(text), context(command))
    assert result.score == 1.0
    assert not result.drift
    assert result.exit_match is True
    assert result.reasons == result.hallucinations == result.omissions == result.stale == []
    p = result.metrics.pop("drift_p")
    assert comparator.calibration is not None and p < comparator.calibration.cutoff
    assert result.metrics == {
        **{"line_sim": 1.0, "token_sim": 1.0, "char_sim": 1.0, "text_sim": 1.0},
        **{"lines_changed": 0.0, "changed_share": 0.0, "chars_changed": 0.0},
    }


@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_volatile_differences_do_not_drift(
    comparator: TerminalComparator, name: str, seed: int
) -> None:
    """Two real runs of one command differ in dates, PIDs, SHAs, durations, temp names, order."""
    command, render = OUTPUTS[name]
    real, sim = render(Run(seed)), render(Run(seed + 100))
    assert real != sim
    result = comparator.compare(obs(real), obs(sim), context(command))
    assert (result.score, result.drift, result.reasons) == (1.0, False, [])
    assert result.hallucinations == result.omissions == result.stale == []
    assert sum(result.normalizations.values()) > 0


def test_normalizations_are_summed_over_both_sides(comparator: TerminalComparator) -> None:
    result = comparator.compare(obs("pid 12\n"), obs("pid 13\npid 14\n"), context("ps"))
    assert result.normalizations == {"pid": 3}


def test_added_file_in_listing_is_a_hallucination(comparator: TerminalComparator) -> None:
    real = ls_la_output(Run(1))
    sim = ls_la_output(Run(2), extra=[("-rw-r--r--", 1, 33, "secrets.txt")])
    result = comparator.compare(obs(real), obs(sim), context("ls -la"))
    assert result.drift
    assert "file:secrets.txt" in result.hallucinations
    assert "hallucinated file:secrets.txt" in result.reasons
    assert result.score > DEFAULT_THRESHOLD  # one line in eleven: the entity check catches it


def test_missing_file_in_listing_is_an_omission(comparator: TerminalComparator) -> None:
    real = ls_la_output(Run(1))
    sim = "\n".join(line for line in ls_la_output(Run(2)).splitlines() if "notes" not in line)
    result = comparator.compare(obs(real), obs(sim + "\n"), context("ls -la"))
    assert result.drift
    assert "file:notes" in result.omissions
    assert "omitted file:notes" in result.reasons


def test_changed_count_in_wc_output(comparator: TerminalComparator) -> None:
    real = "  17 src/app.py\n 120 src/config.py\n 137 total\n"
    sim = "  71 src/app.py\n 120 src/config.py\n 191 total\n"
    result = comparator.compare(obs(real), obs(sim), context("wc -l src/*.py"))
    assert result.drift
    assert {"number:71", "number:191"} <= set(result.hallucinations)
    assert {"number:17", "number:137"} <= set(result.omissions)
    assert "number:120" not in result.hallucinations + result.omissions


def test_flipped_exit_code_drifts_and_halves_the_score(comparator: TerminalComparator) -> None:
    text = "cat: notes: No such file or directory\n"
    result = comparator.compare(obs(text, 1), obs(text, 0), context("cat notes"))
    assert result.drift
    assert result.exit_match is False
    assert result.score == 0.5
    assert "exit_code 1 != 0" in result.reasons


def test_unknown_exit_code_is_not_compared(comparator: TerminalComparator) -> None:
    result = comparator.compare(obs("ok\n", None), obs("ok\n", 3), context("true"))
    assert result.exit_match is None
    assert (result.score, result.drift) == (1.0, False)


def test_invented_traceback_is_a_hallucination(comparator: TerminalComparator) -> None:
    real = "Loaded 3 records\n"
    sim = real + (
        "Traceback (most recent call last):\n"
        '  File "/workspace/app.py", line 12, in <module>\n'
        "    main()\n"
        "KeyError: 'x'\n"
    )
    result = comparator.compare(obs(real), obs(sim, 1), context("python app.py"))
    assert result.drift
    assert "error:KeyError" in result.hallucinations
    assert "path:/workspace/app.py" in result.stale  # the action named app.py
    assert any(r.startswith("drift probability ") for r in result.reasons)


def test_entity_shown_in_history_is_stale_not_hallucinated(comparator: TerminalComparator) -> None:
    """The model repeats a file it saw earlier that no longer exists for real."""
    real = ls_la_output(Run(1))
    sim = ls_la_output(Run(2), extra=[("-rw-r--r--", 1, 33, "draft.txt")])
    history = [("touch draft.txt", ""), ("rm draft.txt", "")]
    result = comparator.compare(obs(real), obs(sim), context("ls -la", history))
    assert "file:draft.txt" in result.stale
    assert "file:draft.txt" not in result.hallucinations
    assert "number:33" in result.hallucinations
    assert result.drift
    assert "stale file:draft.txt" in result.reasons


def test_entity_from_history_output_and_description_is_stale(
    comparator: TerminalComparator,
) -> None:
    real = "total 0\n"
    sim = "Traceback (most recent call last):\nValueError: bad port\nsee /etc/app.conf\n"
    history = [("python app.py", "ValueError: bad port\n")]
    result = comparator.compare(
        obs(real), obs(sim, 1), context("cat log", history, description="config in /etc/app.conf")
    )
    assert {"error:ValueError", "path:/etc/app.conf"} <= set(result.stale)
    # what was never shown stays a hallucination: the lines around the shown names
    assert "line:see /etc/app.conf" in result.hallucinations
    assert not {"error:ValueError", "path:/etc/app.conf"} & set(result.hallucinations)
    # a line is invented at this step even when an earlier step printed it
    assert "line:ValueError: bad port" in result.hallucinations
    assert not any(e.startswith("line:") for e in result.stale)


def test_file_named_by_a_shown_path_is_stale(comparator: TerminalComparator) -> None:
    history = [("find .", "./src/secrets.txt\n")]
    result = comparator.compare(obs(""), obs("secrets.txt\n"), context("ls", history))
    assert result.stale == ["file:secrets.txt"]


def test_path_whose_name_was_shown_is_stale(comparator: TerminalComparator) -> None:
    history = [("ls", "notes.txt\nsrc\n")]
    result = comparator.compare(
        obs(""),
        obs("/workspace/notes.txt\n/workspace/todo.txt\n"),
        context("find /workspace", history),
    )
    assert result.stale == ["path:/workspace/notes.txt"]
    # the stale name's line is invented at this step (the real output is empty): named last
    assert result.hallucinations == ["path:/workspace/todo.txt", "line:/workspace/notes.txt"]


def test_listing_after_cd_is_still_a_listing(comparator: TerminalComparator) -> None:
    real = "Makefile\nnotes\n"
    result = comparator.compare(obs(real), obs(real + "TODO\n"), context("cd /workspace && ls"))
    assert result.hallucinations == ["file:TODO"]


def test_timed_out_mismatch_drifts(comparator: TerminalComparator) -> None:
    real = Observation(text="", exit_code=None, timed_out=True)
    sim = Observation(text="", exit_code=None)
    result = comparator.compare(real, sim, context("sleep 100"))
    assert result.drift
    assert result.reasons == ["timed_out True != False"]


@pytest.mark.parametrize(
    ("real", "sim", "side"),
    [
        (Observation(error="SandboxError: container died"), obs("ok"), "real"),
        (obs("ok"), Observation(error="MalformedPredictionError: empty"), "sim"),
    ],
)
def test_infrastructure_failure_is_kept_apart(
    comparator: TerminalComparator, real: Observation, sim: Observation, side: str
) -> None:
    result = comparator.compare(real, sim, context("ls"))
    assert result.infra_failure
    assert (result.score, result.drift) == (0.0, False)
    assert result.reasons and result.reasons[0].startswith(f"{side} side failed")
    assert result.hallucinations == result.omissions == []


def test_both_sides_failing_names_both(comparator: TerminalComparator) -> None:
    failed = Observation(error="boom")
    result = comparator.compare(failed, failed, context("ls"))
    assert [r.split()[0] for r in result.reasons] == ["real", "sim"]


def test_low_score_is_a_reason(comparator: TerminalComparator) -> None:
    fixed = TerminalComparator(calibrated=False)
    result = fixed.compare(obs("alpha beta gamma\n"), obs("something else\n"), context("x"))
    assert result.drift
    assert result.reasons[0] == f"score {result.score:.2f} < 0.90"
    calibrated = comparator.compare(
        obs("alpha beta gamma\n"), obs("something else\n"), context("x")
    )
    assert calibrated.reasons[0].startswith("drift probability")  # a whole text replaced
    assert calibrated.metrics["drift_p"] >= 0.9


def test_threshold_is_configurable() -> None:
    lenient = TerminalComparator(threshold=0.1)
    result = lenient.compare(obs("alpha beta\n"), obs("alpha gamma\n"), context("echo"))
    assert not any(r.startswith("score") for r in result.reasons)
    with pytest.raises(ValueError, match="threshold"):
        TerminalComparator(threshold=1.5)


def test_reasons_and_lists_are_capped(comparator: TerminalComparator) -> None:
    sim = "\n".join(f"file{i}.txt" for i in range(12)) + "\n"
    result = comparator.compare(obs(""), obs(sim), context("ls"))
    assert result.hallucinations == [f"file:file{i}.txt" for i in range(10)]  # in text order
    listed = [r for r in result.reasons if r.startswith("hallucinated")]
    assert len(listed) == 6
    assert listed[-1] == "hallucinated 5 more (kinds: file)"


def test_keystrokes_actions_use_the_typed_command(comparator: TerminalComparator) -> None:
    action = KeystrokesAction(keys="find .\n")
    ctx = context("find .").model_copy(update={"action": action})
    real, sim = "./b\n./a\n", "./a\n./b\n"
    result = comparator.compare(obs(real), obs(sim), ctx)
    assert (result.score, result.normalizations) == (1.0, {"unordered_lines": 2})


def test_score_stays_in_unit_interval_on_random_pairs(comparator: TerminalComparator) -> None:
    rng = random.Random(0)
    alphabet = "ab 1\n\t.:/-x\x1b[0m"
    for _ in range(300):
        a = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        b = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        result = comparator.compare(obs(a, rng.choice([0, 1, None])), obs(b, 0), context("ls"))
        assert 0.0 <= result.score <= 1.0
        assert result.drift == bool(result.reasons)


def test_similarity_metrics() -> None:
    assert similarity("", "") == {
        "line_sim": 1.0,
        "token_sim": 1.0,
        "char_sim": 1.0,
        "text_sim": 1.0,
    }
    metrics = similarity("a\nb\nc\n", "a\nb\nd\n")
    assert all(0.0 < v < 1.0 for v in metrics.values())
    assert similarity("abc", "xyz")["char_sim"] == 0.0


def test_entity_diff_ignores_entities_on_shared_lines() -> None:
    real = "12 a.txt\n7 b.txt\n"
    sim = "12 a.txt\n8 b.txt\n12 c.txt\n"
    assert entity_diff(real, sim) == ({"number:8", "file:c.txt"}, {"number:7"})


def test_a_shifted_numbered_view_names_its_lines_before_its_line_numbers(
    comparator: TerminalComparator,
) -> None:
    """``cat -n`` shown one line off with one invented line (the dev set's swe|tf|pydata__
    xarray-7229|7): the number column changes on every line, and ten numbers in a row would
    fill the cap before the invented line is named."""
    body = [f"    value_{i} = compute({i})" for i in range(30)]
    real = "".join(f"{n + 100:6d}\t{line}\n" for n, line in enumerate(body))
    invented = [*body[:15], "    raise NotImplementedError('keep_attrs')", *body[15:]]
    sim = "".join(f"{n + 101:6d}\t{line}\n" for n, line in enumerate(invented))
    result = comparator.compare(obs(real), obs(sim), context("cat -n m.py"))
    assert result.drift
    assert any("NotImplementedError" in e for e in result.hallucinations[:3])
    assert not any(e.startswith("number:") for e in result.hallucinations[:5])


def test_a_listed_name_shown_before_is_named_by_its_line(comparator: TerminalComparator) -> None:
    """``__pycache__`` in another folder's listing made the name stale (swe|tf|matplotlib__
    matplotlib-22871|3): the listing's invented line still names it at this step, once."""
    history = [("ls lib", "__pycache__\nsetup.py\n")]
    result = comparator.compare(
        obs("__init__.py\ncolors.py\n"),
        obs("__init__.py\n__pycache__\ncolors.py\n"),
        context("ls lib/matplotlib", history),
    )
    assert result.stale == ["file:__pycache__"]
    assert result.hallucinations == ["line:__pycache__"]
    fresh = comparator.compare(
        obs("__init__.py\ncolors.py\n"), obs("__init__.py\n__pycache__\ncolors.py\n"), context("ls")
    )
    assert fresh.hallucinations == ["file:__pycache__"]


def test_dotfiles_are_names_and_rank_before_sizes(comparator: TerminalComparator) -> None:
    """An ``ls -la`` with invented dotfiles and other sizes (swe|tf|pylint-dev__pylint-7277|1):
    ``.flake8`` is a name, not an extensionless word ranked with the numbers."""
    real = "total 96\n-rw-r--r--  1 root root  2006 Oct 24  2024 setup.cfg\n"
    sim = (
        "total 100\n-rw-r--r--  1 root root   187 Oct 24  2024 .flake8\n"
        "-rw-r--r--  1 root root  2010 Oct 24  2024 setup.cfg\n"
    )
    result = comparator.compare(obs(real), obs(sim), context("ls -la"))
    assert result.hallucinations[0] == "file:.flake8"


def test_the_exception_line_of_an_invented_traceback_is_the_first_line_named(
    comparator: TerminalComparator,
) -> None:
    """An uncaught error where the real run caught it (swe|tf|scikit-learn__scikit-learn-
    14894|2): of the traceback's lines, its last one says what happened."""
    frames = "".join(
        f'  File "/testbed/sklearn/svm/base.py", line {n}, in fit\n    self._fit(X, y)\n'
        for n in (198, 291, 305)
    )
    sim = f"Traceback (most recent call last):\n{frames}ZeroDivisionError: float division by zero\n"
    result = comparator.compare(
        obs("Caught expected ZeroDivisionError\n"), obs(sim), context("python reproduce.py")
    )
    lines = [e for e in result.hallucinations if e.startswith("line:")]
    assert lines[0] == "line:ZeroDivisionError: float division by zero"
