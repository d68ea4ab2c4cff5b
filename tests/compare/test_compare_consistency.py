"""Cross-turn consistency: entities the sim created must persist where real keeps them."""

from __future__ import annotations

from fidelity import pipeline
from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext
from fidelity.compare.consistency import check_consistency, stateful
from fidelity.trajectory import CommandAction, Domain, Observation, Step, TextAction, Trajectory
from fidelity.worldmodels.base import Mode


def run(domain: Domain, actions: list[str], real: list[str], sim: list[str]):  # type: ignore[no-untyped-def]
    if domain is Domain.terminal:
        steps = [Step(action=CommandAction(command=a)) for a in actions]
    else:
        steps = [Step(action=TextAction(text=a)) for a in actions]
    trajectory = Trajectory(id="t", domain=domain, steps=steps)
    real_obs = [
        Observation(text=t, exit_code=0 if domain is Domain.terminal else None) for t in real
    ]
    sim_obs = [Observation(text=t, exit_code=0 if domain is Domain.terminal else None) for t in sim]
    shown = pipeline.shown_history(trajectory, real_obs, sim_obs, Mode.teacher_forced)
    return pipeline.compare(trajectory, real_obs, sim_obs, shown)


def test_file_created_then_forgotten_is_inconsistent() -> None:
    actions = ["touch notes.txt && ls", "echo hi", "ls"]
    real = ["README.md\nnotes.txt\n", "hi\n", "README.md\nnotes.txt\n"]
    sim = ["README.md\nnotes.txt\n", "hi\n", "README.md\n"]
    results = run(Domain.terminal, actions, real, sim)
    assert [r.drift for r in results] == [False, False, True]
    assert "inconsistent file:notes.txt (created at step 1)" in results[2].reasons
    assert results[2].metrics["inconsistent"] == 1.0


def test_consistent_trajectory_has_no_findings() -> None:
    actions = ["touch notes.txt && ls", "ls"]
    listing = "README.md\nnotes.txt\n"
    results = run(Domain.terminal, actions, [listing, listing], [listing, listing])
    assert not any(r.drift for r in results)
    assert all("inconsistent" not in r.metrics for r in results)


def test_entity_real_dropped_too_is_not_inconsistent() -> None:
    actions = ["ls", "rm notes.txt && ls"]
    real = ["README.md\nnotes.txt\n", "README.md\n"]
    results = run(Domain.terminal, actions, real, real)
    assert not any(r.drift for r in results)


def test_web_label_created_then_missing() -> None:
    page = "[1] main ''\n\t[2] link 'Draft: Q3 plan'\n\t[3] button 'New'\n"
    later = "[9] main ''\n\t[10] button 'New'\n\t[11] link 'Draft: Q3 plan'\n"
    results = run(
        Domain.web,
        ["click('3')", "goto('/')"],
        [page, later],
        [page, "[1] main ''\n\t[2] button 'New'\n"],
    )
    assert "inconsistent ui:link:Draft: Q3 plan (created at step 1)" in results[1].reasons
    assert results[1].drift


def test_infra_failure_steps_are_skipped() -> None:
    comparator = get_comparator("terminal")
    contexts = [CompareContext(action=CommandAction(command="ls"), depth=d) for d in (1, 2)]
    real = [Observation(text="a.txt\n", exit_code=0), Observation(text="a.txt\n", exit_code=0)]
    sim = [Observation(text="a.txt\n", exit_code=0), Observation(error="WorldModelError: 500")]
    comparisons = [comparator.compare(r, s, c) for r, s, c in zip(real, sim, contexts, strict=True)]
    checked = check_consistency(comparator, real, sim, contexts, comparisons)
    assert checked[1].infra_failure and not checked[1].drift


def test_only_stateful_kinds_count() -> None:
    assert stateful({"file:a.txt", "number:42", "errmsg:Killed", "ui:button:OK"}) == {
        "file:a.txt",
        "ui:button:OK",
    }
