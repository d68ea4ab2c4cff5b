"""``fidelity gate DATASET.jsonl``: verify a simulated dataset against reality before training.

The dataset is streamed (JSONL, ``.jsonl.gz``/``.jsonl.zst``, Parquet, or a folder
or glob of shards: :mod:`fidelity.formats.dataset`); memory holds 12 bytes a
trajectory (its length and id hash), never the dataset.

1. Read and validate the dataset (every step must carry its simulated observation;
   no line may name a host command or site the operator did not allow), keeping each
   trajectory's length; nothing is written before this pass ends (:mod:`.scan`).
2. Plan the draws (:mod:`.sample`: i.i.d. from a length-weighted mixture, seeded) and
   read the lines they may replay into a spool.
3. Replay the drawn action sequences in real sandboxes in rounds, compare each recorded
   (simulated) observation with the real one, store the comparisons as a run in DuckDB
   (``fidelity report --run ID`` shows it), and decide every limit of the policy on its
   confidence bound after each round (:mod:`.rounds`, :mod:`.limits`): ``--sample auto``
   stops when every limit is decided.
4. Critical checks fail the gate (an undecided one too), warnings warn.
5. Read a third time, decide per trajectory and write it to ``admitted.jsonl`` or
   ``quarantined.jsonl`` as it is decided, its decision to ``decisions.jsonl``,
   and then ``manifest.json`` (with the bounds of every limit and on what was admitted):

   - a verified trajectory with no drifting step is admitted whole;
   - a verified trajectory that drifts is, with ``cut_at_horizon``, admitted cut
     at its own trust horizon (the steps before its first drift) when that
     prefix is at least ``max(1, min_trust_horizon)`` steps long; otherwise it
     is quarantined;
   - a verified trajectory whose claimed outcome (``outcome.success``) the real
     check (``env.check``) contradicts is quarantined, ``quarantine_reason:
     "outcome"``, whatever its steps' drift;
   - a sampled trajectory whose environment could not be had (its image missing and not
     pullable, its site down, its build failed) is ``unverifiable``: never admitted,
     written to ``quarantined.jsonl`` with ``quarantine_reason: "unverifiable"`` and the
     reason; the policy's ``max_unverifiable_rate`` bounds how many there may be;
   - a verified trajectory whose claimed outcome the real check could not establish (the
     check could not run: a test script that needs the network, a record without its eval
     script) is quarantined, ``quarantine_reason: "outcome-unverifiable"``;
   - an unverified trajectory (never replayed) follows the verdict: admitted
     on pass or warn (cut at the domain's trust horizon with ``cut_at_horizon``),
     quarantined on fail.

   A quarantined line's ``meta.quarantine_reason`` says why (``drift``, ``outcome``,
   ``outcome-unverifiable``, ``gate``, ``unverifiable``) and ``meta.quarantine_detail`` in
   a sentence.
6. With ``to`` (``--to verl`` …), the admitted trajectories are also written in those
   RL stacks' formats (:mod:`fidelity.formats.rl_export`: ``admitted.verl.parquet`` …,
   each row carrying its per-step verdicts, trust horizon and outcome agreement),
   staged and installed with the other outputs and listed in the manifest.

Every trajectory of the dataset ends up in exactly one of the two files. With
``layout="sharded"`` the three outputs are folders (``admitted/`` ...) of one
``part-NNNNNN.jsonl`` per input shard, written by the shard's own task and never
copied by the driver; concatenated in name order they are the joined files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fidelity import gate_outputs, pipeline
from fidelity.analysis.models import DEFAULT_HORIZON_LIMIT
from fidelity.analysis.summary import summarize
from fidelity.analysis.tallies import read_tallies
from fidelity.audit import new_run_id
from fidelity.gate.options import GateOptions, LineRules, Manifest
from fidelity.gate.rounds import RoundCallback, planned_positions, replay_rounds
from fidelity.gate.sample import spool_sample
from fidelity.gate.scan import quiet, scan_dataset
from fidelity.gate.verify import run_info, verified_facts
from fidelity.gate.write import Sample, output_paths, replaced_paths, write
from fidelity.policy import Policy, horizon_limit
from fidelity.store import Store

logger = logging.getLogger(__name__)


def gate_dataset(
    options: GateOptions,
    policy: Policy,
    progress: pipeline.ProgressCallback | None = None,
    on_round: RoundCallback | None = None,
) -> Manifest:
    """Gate *options.dataset* under *policy*; writes the output files, returns the manifest.

    Streams the dataset: pass 1 validates every line and draws the sample
    (nothing is written before it ends, so a malformed line fails with
    ``shard:line: field: reason`` first); pass 2 picks the sampled lines and
    replays them; pass 3 writes every trajectory to ``admitted.jsonl`` or
    ``quarantined.jsonl`` as it is decided. Memory stays flat in the size of
    the dataset (the sample and a few counters are held, never the dataset).

    Each pass works shard by shard; with ``executor="ray"`` the shards of each
    pass are read at once by Ray tasks across the cluster (every node must see
    the dataset and the output folder at the same paths), and the driver
    merges what they learned and concatenates the files they wrote, in shard
    order: the outputs are byte for byte those of a local gate. With
    ``layout="sharded"`` it keeps them as one file per shard instead (no copy).
    Files in the output folder that a gate writes, and hidden entries such as
    its staging folder, are never read as shards of a folder or glob dataset.

    *progress* hears ``("total:scan", 0)`` (a total not known yet) and then
    ``("scan", n)`` as trajectories are read, ``("total:real", n)`` and
    ``("real", 1)`` per replayed trajectory of the sample, and ``("total:write",
    n)`` and ``("write", n)`` as trajectories are decided.

    What a stopped (killed) gate left in the output folder is settled first, and
    said on stderr (:func:`fidelity.gate_outputs.recover`).
    """
    report = progress or quiet
    gate_outputs.recover_unlocked(options.output_dir)
    gate_outputs.pause("recovered")
    gate_outputs.refuse_to_replace(
        options.output_dir, replaced_paths(options.output_dir), options.dataset
    )
    scan = scan_dataset(
        options.dataset,
        options.allowed_roots,
        LineRules(
            trust=options.trust,
            sandbox=options.sandbox,
            needs_instruction=options.export.needs_instruction(options.to) if options.to else False,
        ),
        executor=options.executor,
        ray_address=options.ray_address,
        progress=report,
        exclude=output_paths(options.output_dir),
    )
    domain = scan.domain
    run_id = options.run_id or new_run_id()
    limit = horizon_limit(policy, domain, DEFAULT_HORIZON_LIMIT)
    draws = planned_positions(scan, options)
    logger.info(
        "run %s: %d trajectories of domain %s read; %d draws planned (sample %s, seed %d)",
        run_id,
        scan.trajectories,
        domain,
        len(draws),
        options.sample,
        options.seed,
    )
    with Store(options.db) as store:
        store.start_run(run_id, run_info(options, scan))
        spool = spool_sample(scan, sorted(set(draws.tolist())), options, _spool_folder())
        try:
            sampled = replay_rounds(
                store, run_id, scan, options, policy, spool, draws, limit, report, on_round
            )
        finally:
            spool.close()
        store.finish_run(run_id, "done")
        summary = summarize(store, run_id, limit, worst=0, detail=False)
        verified = verified_facts(store, run_id, bool(options.to))
        verified.unverifiable = {row.trajectory_id: row.reason for row in summary.unverifiable}
        verified.risk = _risk_model(store, run_id)
        replayed = list(read_tallies(store, run_id, summary.totals.mode).values())
    manifest = write(
        options,
        policy,
        scan,
        verified,
        sampled.verdict,
        summary.totals.trust_horizon or 0,
        run_id,
        report,
        Sample(sampled.evidence, replayed),
    )
    with Store(options.db) as store:  # the claim stays with the run (the report shows it)
        store.record_gate(run_id, gate_claim(manifest))
    counts = manifest.counts
    logger.info(
        "run %s: %s; admitted %d, quarantined %d",
        run_id,
        manifest.verdict.status,
        counts.admitted,
        counts.quarantined,
    )
    return manifest


def gate_claim(manifest: Manifest) -> dict[str, object]:
    """What a dataset gate states, as kept with its run: its verdict, the bounds of every
    limit, and the bounds on what it admitted."""
    return manifest.model_dump(
        mode="json",
        include={
            "verdict": {"status"},
            "confidence": True,
            "replayed_trajectories": True,
            "draws": True,
            "limits": True,
            "admitted_claim": True,
            "counts": True,
        },
    )


def _risk_model(store: Store, run_id: str) -> object:
    """The drift risk fitted on the run's replays, cross-fitted (a replayed trajectory is
    scored by the fold that did not see it); the shipped prior when nothing was compared."""
    from fidelity.errors import UsageError
    from fidelity.risk import prior_model
    from fidelity.risk_data import fit_on_run

    try:
        return fit_on_run(store, run_id)
    except UsageError:  # no compared step to fit on (every replay unverifiable)
        return prior_model()


def _spool_folder() -> Path:
    """Where pass 2 spools the lines it may replay (the system's temporary folder)."""
    import tempfile

    return Path(tempfile.gettempdir())
