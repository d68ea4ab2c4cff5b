"""Every read of the store, by name: the SQL lives here, next to the schema in :mod:`fidelity.store`.

Analysis, drift, the judge and reports call :func:`rows`, :func:`row`,
:func:`dicts` or :func:`grouped` with a query's name and its parameters; no
other module holds SQL. A query that changes with the schema changes here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fidelity.store import Store

_FETCH_ROWS = 50_000

RATES = """
    count(*) AS steps,
    coalesce(avg(c.drift::INT) FILTER (WHERE NOT c.infra_failure), 0) AS drift_rate,
    coalesce(avg((len(c.hallucinations) > 0)::INT) FILTER (WHERE NOT c.infra_failure), 0)
        AS hallucination_rate,
    coalesce(avg(c.score) FILTER (WHERE NOT c.infra_failure), 0) AS mean_score
"""
"""Step count, drift and hallucination rates and mean score of comparisons ``c``."""

MODE_FILTER = "(?::VARCHAR IS NULL OR c.mode = ?)"
"""Parameters (mode, mode): every mode when None."""

_PER_TRAJECTORY = """
    SELECT c.domain, c.mode, {key} AS key, c.trajectory_id,
           count(*) FILTER (WHERE NOT c.infra_failure) AS n,
           count(*) FILTER (WHERE NOT c.infra_failure AND c.drift) AS d,
           count(*) FILTER (WHERE NOT c.infra_failure AND len(c.hallucinations) > 0) AS h,
           coalesce(sum(c.score) FILTER (WHERE NOT c.infra_failure), 0) AS s
    FROM comparisons c {join}
    WHERE c.run_id = ?
    GROUP BY ALL
    HAVING count(*) FILTER (WHERE NOT c.infra_failure) > 0
    ORDER BY c.domain, c.mode, key, c.trajectory_id
"""

_DRIFT = """
    SELECT domain, mode, {key} AS key, trajectory_id,
           count(*) FILTER (WHERE NOT infra_failure) AS n,
           count(*) FILTER (WHERE NOT infra_failure AND drift) AS d,
           count(*) FILTER (WHERE NOT infra_failure AND len(hallucinations) > 0) AS h
    FROM comparisons WHERE run_id = ?
    GROUP BY ALL HAVING count(*) FILTER (WHERE NOT infra_failure) > 0
    ORDER BY domain, mode, key, trajectory_id
"""

QUERIES: dict[str, str] = {
    "cells_trajectory_horizons": """SELECT trajectory_id,
                  coalesce(min(depth) FILTER (WHERE drift OR infra_failure) - 1, max(depth))
           FROM comparisons WHERE run_id = ? GROUP BY trajectory_id""",
    "cells_horizons": """SELECT domain, mode, list(h ORDER BY h), count(*) FILTER (WHERE h = n)
           FROM (SELECT domain, mode, trajectory_id, count(*) AS n,
                        coalesce(min(depth) FILTER (WHERE drift OR infra_failure) - 1, count(*)) AS h
                 FROM comparisons WHERE run_id = ? GROUP BY ALL)
           GROUP BY ALL ORDER BY domain, mode""",
    "cells_entities": """WITH h AS (
               SELECT split_part(e, ':', 1) AS kind, count(*) AS n,
                      count(DISTINCT (trajectory_id, depth, mode, sample)) AS steps
               FROM (SELECT trajectory_id, depth, mode, sample, unnest(hallucinations) AS e
                     FROM comparisons WHERE run_id = ? AND NOT infra_failure)
               GROUP BY kind),
           o AS (
               SELECT split_part(e, ':', 1) AS kind, count(*) AS n
               FROM (SELECT unnest(omissions) AS e
                     FROM comparisons WHERE run_id = ? AND NOT infra_failure)
               GROUP BY kind)
           SELECT kind, coalesce(h.n, 0), coalesce(h.steps, 0), coalesce(o.n, 0)
           FROM h FULL OUTER JOIN o USING (kind)
           ORDER BY 2 DESC, 4 DESC, kind""",
    "cells_normalizations": """SELECT rule, sum(n)::BIGINT, count(*) FILTER (WHERE n > 0)
           FROM (SELECT unnest(map_keys(m)) AS rule, unnest(map_values(m)) AS n
                 FROM (SELECT normalizations::MAP(VARCHAR, BIGINT) AS m
                       FROM comparisons WHERE run_id = ?))
           GROUP BY rule HAVING sum(n) > 0 ORDER BY 2 DESC, rule""",
    "cells_trend": """WITH this AS (SELECT domain, started_at FROM runs WHERE run_id = ?),
           recent AS (
               SELECT r.* FROM runs r, this
               WHERE r.domain = this.domain AND r.started_at <= this.started_at
               ORDER BY r.started_at DESC LIMIT ?)
           SELECT r.run_id, r.started_at, r.world_model, r.code_version, r.mode,
                  count(c.score) FILTER (WHERE NOT c.infra_failure),
                  coalesce(avg(c.drift::INT) FILTER (WHERE NOT c.infra_failure), 0),
                  coalesce(avg((len(c.hallucinations) > 0)::INT)
                           FILTER (WHERE NOT c.infra_failure), 0),
                  coalesce(avg(c.score) FILTER (WHERE NOT c.infra_failure), 0)
           FROM recent r LEFT JOIN comparisons c USING (run_id)
           GROUP BY ALL ORDER BY r.started_at""",
    "simulation_samples_per_mode": """SELECT mode, max(sample) + 1 FROM observations
           WHERE run_id = ? AND side = 'sim' GROUP BY mode""",
    "simulation_spread": """SELECT s.trajectory_id, s.depth, s.sample, s.text, s.error, r.text, r.error
           FROM observations s
           JOIN observations r ON r.run_id = s.run_id AND r.trajectory_id = s.trajectory_id
                AND r.depth = s.depth AND r.side = 'real'
           WHERE s.run_id = ? AND s.side = 'sim' AND s.mode = ?
           ORDER BY s.trajectory_id, s.depth, s.sample""",
    "simulation_control_outcomes": """SELECT o.mode, st.control, o.text, o.exit_code, o.error
           FROM observations o JOIN steps st USING (run_id, trajectory_id, depth)
           WHERE o.run_id = ? AND o.side = 'sim' AND st.control IS NOT NULL""",
    "summary_judge": "SELECT count(*) FROM judgments WHERE run_id = ? AND error IS NULL",
    "drift_ref": "SELECT run_id, started_at, domain, mode, world_model, code_version FROM runs "
    "WHERE run_id = ?",
    "judge_load_steps": """SELECT c.trajectory_id, c.depth, c.mode, c.sample, c.domain, t.env, s.action_json,
                  r.text, r.exit_code, m.text, m.exit_code
           FROM comparisons c
           JOIN trajectories t USING (run_id, trajectory_id)
           JOIN steps s USING (run_id, trajectory_id, depth)
           JOIN observations r ON r.run_id = c.run_id AND r.trajectory_id = c.trajectory_id
                AND r.depth = c.depth AND r.side = 'real'
           JOIN observations m ON m.run_id = c.run_id AND m.trajectory_id = c.trajectory_id
                AND m.depth = c.depth AND m.side = 'sim' AND m.mode = c.mode
                AND m.sample = c.sample
           WHERE c.run_id = ? AND NOT c.infra_failure AND t.status = 'done'
           ORDER BY c.trajectory_id, c.mode, c.sample, c.depth
           LIMIT ?""",
    "judge_real_history": """SELECT s.trajectory_id, s.action_json, o.text, o.exit_code
           FROM steps s JOIN observations o USING (run_id, trajectory_id, depth)
           WHERE s.run_id = ? AND o.side = 'real' ORDER BY s.trajectory_id, s.depth""",
    # (trajectory, depth, mode, sample, judge JSON) of each valid judgment: a rerun keeps them
    "judge_valid_judgments": """SELECT trajectory_id, depth, mode, sample, judge FROM judgments
           WHERE run_id = ? AND error IS NULL""",
    # (scores JSON, normalized total, deterministic score, domain) of each valid judgment
    "judge_judge_agreement": """SELECT j.scores, j.overall, c.score, c.domain FROM judgments j
           JOIN comparisons c USING (run_id, trajectory_id, depth, mode, sample)
           WHERE j.run_id = ? AND j.error IS NULL AND NOT c.infra_failure
           ORDER BY c.domain, j.trajectory_id, j.depth, j.mode, j.sample""",
    "cells_per_depth": _PER_TRAJECTORY.format(key="c.depth", join=""),
    "cells_per_action": _PER_TRAJECTORY.format(
        key="s.action_name", join="JOIN steps s USING (run_id, trajectory_id, depth)"
    ),
    "drift_per_depth": _DRIFT.format(key="depth"),
    "drift_per_domain": _DRIFT.format(key="0"),
    # claimed and real outcome per trajectory, with its first drifting (or failed) step
    # trajectories whose environment could not be had (their replay error starts with the
    # parameter, pipeline.UNVERIFIABLE), with their compared-step rows in the mode filter
    "unverifiable": f"""SELECT t.trajectory_id, t.domain, t.error,
                  (SELECT count(*) FROM comparisons c
                   WHERE c.run_id = t.run_id AND c.trajectory_id = t.trajectory_id
                         AND {MODE_FILTER}) AS steps
           FROM trajectories t
           WHERE t.run_id = ? AND starts_with(t.error, ?)
           ORDER BY t.trajectory_id""",
    # per stored trajectory of a run (the mode filter on its comparisons): what the gate's
    # confidence bounds count, the trajectory being the sampling unit
    "gate_tallies": f"""SELECT t.trajectory_id, t.n_steps, t.error,
                  count(c.depth) AS rows,
                  count(c.depth) FILTER (WHERE c.drift AND NOT c.infra_failure) AS drift,
                  count(c.depth) FILTER (WHERE len(c.hallucinations) > 0
                                         AND NOT c.infra_failure) AS halluc,
                  count(c.depth) FILTER (WHERE c.infra_failure) AS infra,
                  coalesce(list(DISTINCT c.depth) FILTER (WHERE c.drift AND NOT c.infra_failure),
                           []) AS drift_depths,
                  coalesce(list(DISTINCT c.depth) FILTER (WHERE c.infra_failure), [])
                      AS infra_depths,
                  any_value(o.claimed_success) AS claimed, any_value(o.real_status) AS real
           FROM trajectories t
           LEFT JOIN comparisons c ON c.run_id = t.run_id AND c.trajectory_id = t.trajectory_id
                AND {MODE_FILTER}
           LEFT JOIN outcomes o ON o.run_id = t.run_id AND o.trajectory_id = t.trajectory_id
           WHERE t.run_id = ? AND t.status <> 'replayed'
           GROUP BY t.trajectory_id, t.n_steps, t.error
           ORDER BY t.trajectory_id""",
    "outcomes": """SELECT t.domain, o.trajectory_id, o.claimed_success, o.real_status,
                  o.real_reason, o.check_exit_code,
                  (SELECT min(c.depth) FROM comparisons c
                   WHERE c.run_id = o.run_id AND c.trajectory_id = o.trajectory_id
                         AND (c.drift OR c.infra_failure)) AS first_drift
           FROM outcomes o JOIN trajectories t USING (run_id, trajectory_id)
           WHERE o.run_id = ? ORDER BY t.domain, o.trajectory_id""",
    # (trajectory, depth, score, drift, infra failure) of the first simulation: the RL export
    "rl_step_scores": """SELECT trajectory_id, depth, score, drift, infra_failure
           FROM comparisons WHERE run_id = ? AND sample = 0
           ORDER BY trajectory_id, depth""",
    "summary_run": "SELECT * FROM runs WHERE run_id = ?",
    "summary_totals": f"""SELECT {RATES},
                   count(*) FILTER (WHERE c.infra_failure) AS infra_failures,
                   (SELECT count(*) FROM trajectories t
                    WHERE t.run_id = ? AND t.status <> 'replayed') AS trajectories
            FROM comparisons c WHERE c.run_id = ? AND {MODE_FILTER}""",
    "summary_by_depth": f"""SELECT c.depth, {RATES} FROM comparisons c
            WHERE c.run_id = ? AND {MODE_FILTER} GROUP BY c.depth ORDER BY c.depth""",
    "summary_by_action": f"""SELECT s.action_name, {RATES}
            FROM comparisons c JOIN steps s USING (run_id, trajectory_id, depth)
            WHERE c.run_id = ? AND {MODE_FILTER} GROUP BY s.action_name
            ORDER BY drift_rate DESC, steps DESC, s.action_name""",
    "summary_worst": f"""SELECT c.trajectory_id, c.depth, s.action, s.action_name, c.score,
                  c.drift, c.reasons, r.text AS real_text, m.text AS sim_text,
                  r.exit_code AS real_exit_code, m.exit_code AS sim_exit_code,
                  c.hallucinations, c.omissions, c.normalizations
           FROM comparisons c
           JOIN steps s USING (run_id, trajectory_id, depth)
           JOIN observations r ON r.run_id = c.run_id AND r.trajectory_id = c.trajectory_id
                AND r.depth = c.depth AND r.side = 'real'
           JOIN observations m ON m.run_id = c.run_id AND m.trajectory_id = c.trajectory_id
                AND m.depth = c.depth AND m.side = 'sim' AND m.mode = c.mode AND m.sample = c.sample
           WHERE c.run_id = ? AND NOT c.infra_failure AND {MODE_FILTER}
           ORDER BY c.drift DESC, c.score ASC, c.trajectory_id, c.depth
           LIMIT ?""",
    # each simulated step with its action and drift label: the risk model's fit (fidelity.risk)
    "risk_labelled_steps": """SELECT c.trajectory_id, c.mode, c.sample, c.depth, c.domain,
                  s.action_json, m.text, m.exit_code, m.error, m.state, c.drift, c.infra_failure
           FROM comparisons c
           JOIN steps s USING (run_id, trajectory_id, depth)
           JOIN observations m ON m.run_id = c.run_id AND m.trajectory_id = c.trajectory_id
                AND m.depth = c.depth AND m.side = 'sim' AND m.mode = c.mode AND m.sample = c.sample
           WHERE c.run_id = ?
           ORDER BY c.trajectory_id, c.mode, c.sample, c.depth""",
    # every drifting step (the mode filter), with what tells its cause (fidelity.analysis.causes)
    "causes_drifting_steps": f"""SELECT c.domain, c.trajectory_id, c.depth, c.reasons,
                  c.hallucinations, c.omissions, c.stale
           FROM comparisons c
           WHERE c.run_id = ? AND c.drift AND NOT c.infra_failure AND {MODE_FILTER}
           ORDER BY c.domain, c.trajectory_id, c.depth, c.mode, c.sample""",
    # the world-model exports (fidelity.formats.wm_export): a run's trajectories, compared steps
    "wm_compared": """SELECT count(*) FROM comparisons WHERE run_id = ? AND NOT infra_failure""",
    "wm_trajectories": """SELECT t.trajectory_id, t.domain, t.env, t.task FROM trajectories t
           WHERE t.run_id = ? AND t.trajectory_id IN (
               SELECT trajectory_id FROM comparisons WHERE run_id = ? AND NOT infra_failure)
           ORDER BY t.trajectory_id""",
    # one trajectory's actions, controls and real observations, in depth order
    "wm_steps": """SELECT s.depth, s.action_json, s.control, r.text, r.exit_code, r.cwd,
                  r.timed_out, r.truncated, r.error, r.state
           FROM steps s
           LEFT JOIN observations r ON r.run_id = s.run_id AND r.trajectory_id = s.trajectory_id
                AND r.depth = s.depth AND r.side = 'real'
           WHERE s.run_id = ? AND s.trajectory_id = ?
           ORDER BY s.depth""",
    # one trajectory's simulated observations, per mode and sample
    "wm_simulated": """SELECT mode, sample, depth, text, exit_code, cwd, timed_out, truncated,
                  error, state
           FROM observations
           WHERE run_id = ? AND trajectory_id = ? AND side = 'sim'
           ORDER BY mode, sample, depth""",
    # one trajectory's compared steps (infrastructure failures left out)
    "wm_comparisons": """SELECT mode, sample, depth, domain, score, drift, reasons,
                  hallucinations, omissions, stale
           FROM comparisons
           WHERE run_id = ? AND trajectory_id = ? AND NOT infra_failure
           ORDER BY mode, sample, depth""",
}
"""Every named read."""


def rows(store: Store, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Every row of query *name*."""
    return store.connection.execute(QUERIES[name], list(params)).fetchall()


def row(store: Store, name: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row of query *name* (None when there is none)."""
    return store.connection.execute(QUERIES[name], list(params)).fetchone()


def stream(store: Store, name: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of query *name*, fetched in batches (memory flat in the result's size)."""
    cursor = store.cursor()
    try:
        cursor.execute(QUERIES[name], list(params))
        while batch := cursor.fetchmany(_FETCH_ROWS):
            yield from batch
    finally:
        cursor.close()


def dicts(store: Store, name: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Every row of query *name* as a dict keyed by column name."""
    cursor = store.connection.execute(QUERIES[name], list(params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def grouped(
    store: Store, name: str, run_id: str
) -> Iterator[tuple[tuple[str, str, Any], list[tuple[Any, ...]]]]:
    """Rows of query *name* (ordered by its first three columns) grouped by them, in batches."""
    cursor = store.cursor()
    try:
        cursor.execute(QUERIES[name], [run_id])
        current: tuple[str, str, Any] | None = None
        group: list[tuple[Any, ...]] = []
        while batch := cursor.fetchmany(_FETCH_ROWS):
            for values in batch:
                key = (values[0], values[1], values[2])
                if key != current and group:
                    assert current is not None
                    yield current, group
                    group = []
                current = key
                group.append(values)
        if group and current is not None:
            yield current, group
    finally:
        cursor.close()
