"""``fidelity gate DATASET.jsonl``: verify a simulated dataset against reality before training.

The dataset is streamed (JSONL, ``.jsonl.gz``/``.jsonl.zst``, Parquet, or a folder
or glob of shards: :mod:`fidelity.formats.dataset`); memory stays flat in its size.

1. Read and validate the dataset (every step must carry its simulated
   observation) while drawing a stratified sample of trajectories (by domain
   and trajectory length, proportional, at least one per stratum, seeded) or
   taking them all; nothing is written before this pass ends.
2. Read again, keeping only the sampled lines.
3. Replay the sampled action sequences in real sandboxes, compare each recorded
   (simulated) observation with the real one, and store the comparisons as a
   run in DuckDB (``fidelity report --run ID`` shows it).
4. Apply the policy to the run: critical checks fail the gate, warnings warn.
5. Read a third time, decide per trajectory and write it to ``admitted.jsonl`` or
   ``quarantined.jsonl`` as it is decided, its decision to ``decisions.jsonl``,
   and then ``manifest.json``:

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
   - an unverified trajectory (not in the sample) follows the verdict: admitted
     on pass or warn (cut at the domain's trust horizon with ``cut_at_horizon``),
     quarantined on fail.

   - a verified trajectory whose claimed outcome the real check could not establish (the
     check could not run: a test script that needs the network, a record without its eval
     script) is quarantined, ``quarantine_reason: "outcome-unverifiable"``.

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

from fidelity import gate_outputs, pipeline
from fidelity.analysis.models import DEFAULT_HORIZON_LIMIT
from fidelity.analysis.summary import summarize
from fidelity.audit import new_run_id
from fidelity.gate.options import GateOptions, LineRules, Manifest
from fidelity.gate.sample import sampled
from fidelity.gate.scan import quiet, scan_dataset
from fidelity.gate.verify import run_info, verified_facts, verify
from fidelity.gate.write import output_paths, write
from fidelity.policy import Policy, evaluate, horizon_limit
from fidelity.store import Store


def gate_dataset(
    options: GateOptions, policy: Policy, progress: pipeline.ProgressCallback | None = None
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
    scan = scan_dataset(
        options.dataset,
        options.sample,
        options.seed,
        options.allowed_roots,
        LineRules(trust=options.trust, sandbox=options.sandbox),
        executor=options.executor,
        ray_address=options.ray_address,
        progress=report,
        exclude=output_paths(options.output_dir),
    )
    domain = scan.domain
    run_id = options.run_id or new_run_id()
    limit = horizon_limit(policy, domain, DEFAULT_HORIZON_LIMIT)
    with Store(options.db) as store:
        store.start_run(run_id, run_info(options, scan))
        verify(store, run_id, sampled(scan, options), options, domain, report)
        store.finish_run(run_id, "done")
        summary = summarize(store, run_id, limit, worst=0, detail=False)
        verified = verified_facts(store, run_id, bool(options.to))
        verified.unverifiable = {row.trajectory_id: row.reason for row in summary.unverifiable}
    verdict = evaluate(summary, policy)
    return write(
        options, policy, scan, verified, verdict, summary.totals.trust_horizon or 0, run_id, report
    )
