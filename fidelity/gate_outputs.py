"""The dataset gate's outputs: staged in a hidden folder, renamed into place, recovered.

A gate writes its outputs into a staging folder ``OUT/.gate-parts.XXXXXXXX/`` and
installs them with renames (:func:`install`). Three things keep ``OUT`` whole
whatever stops the gate:

- **a lock**: the gate holds an exclusive ``flock`` on ``OUT`` itself from before
  it creates its staging folder until it has removed it (:func:`output_lock`), so
  a staging folder found while the lock is free was left by a gate that is gone
  (killed); a gate still running keeps its own;
- **a journal** (``journal.json`` in the staging folder) of every rename the
  install will do, written before the first: the previous manifest and outputs
  into ``replaced/``, the new outputs into ``OUT``, and the new ``manifest.json``
  last (that rename is the commit). Whether one rename is done is read from the
  staging folder (a path moved into it exists, a path moved out of it does not),
  so the undo (:func:`roll_back`) and the next gate's recovery (:func:`recover`)
  follow it at any instant: not committed, the renames done are undone (the
  previous outputs and manifest come back); committed, the staging folder goes;
- **signals held**: SIGINT and SIGTERM are recorded during the install and acted
  on between renames (undo, then the interrupt goes on) or after the commit.

Fault injection (tests only): with ``FIDELITY_GATE_PAUSE=R,W`` (two inherited file
descriptors), the gate writes the name of each point of its output phase
(:func:`pause`) and a newline to descriptor R and waits for one byte on W, so a
test can signal or kill it at a named point. Unset, :func:`pause` returns at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from fidelity.errors import InputFormatError, UsageError, writing

STAGING_PREFIX = ".gate-parts."
MANIFEST = "manifest.json"
JOURNAL = "journal.json"
PAUSE_ENV = "FIDELITY_GATE_PAUSE"
_MANIFEST_TEMPS = f".{MANIFEST}."  # an earlier version's manifest temp files in OUT
OUTPUTS = ("admitted", "quarantined", "decisions")  # a gate's outputs, NAME.jsonl or NAME/
_OUTPUT_NAMES = frozenset(f"{name}{suffix}" for name in OUTPUTS for suffix in (".jsonl", ""))

Notice = Callable[[str], None]


def stderr_notice(message: str) -> None:
    """Print one line to stderr (what recovery did)."""
    print(message, file=sys.stderr, flush=True)


class Journal(BaseModel):
    """The renames of one install, in order, relative to the output folder."""

    model_config = ConfigDict(extra="forbid")

    staging: str
    renames: list[tuple[str, str]]


def pause(point: str) -> None:
    """A named point of the output phase (fault injection; see the module docstring)."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    report, resume = (int(fd) for fd in spec.split(","))
    os.write(report, f"{point}\n".encode())
    os.read(resume, 1)


@contextlib.contextmanager
def output_lock(out: Path, notice: Notice = stderr_notice) -> Iterator[None]:
    """Hold the output folder's lock (waiting, with a notice, for a gate holding it)."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if not _try_lock(fd):
            notice(f"gate: {out}: another gate is writing its outputs here; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def recover_unlocked(out: Path, notice: Notice = stderr_notice) -> None:
    """:func:`recover` *out* now if no gate holds its lock (one that does is left alone)."""
    if not out.is_dir():
        return
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _try_lock(fd):
            recover(out, notice)
    finally:
        os.close(fd)


def recover(out: Path, notice: Notice = stderr_notice) -> None:
    """Settle what stopped gates left in *out*; the caller holds its lock.

    A staging folder whose install had not committed gives the previous outputs
    and manifest back; every staging folder and manifest temp file is then
    removed. One line to *notice* says what was done.
    """
    done: list[str] = []
    for entry in sorted(out.iterdir()):
        if entry.name.startswith(STAGING_PREFIX) and entry.is_dir() and not entry.is_symlink():
            restored = _settle(out, entry)
            done.append(
                f"{'restored the previous outputs from' if restored else 'removed'} {entry.name}"
            )
        elif entry.name.startswith(_MANIFEST_TEMPS) and entry.is_file():
            entry.unlink()
            done.append(f"removed {entry.name}")
    if done:
        notice(f"gate: {out}: left by a stopped gate: {'; '.join(done)}")


def _settle(out: Path, staging: Path) -> bool:
    """Roll one left staging folder back or forward and remove it; True when outputs came
    back into *out*."""
    journal = staging / JOURNAL
    if journal.exists():
        renames = _read_journal(journal).renames
        restored = not _committed(out, renames) and roll_back(out, renames) > 0
        journal.unlink()
    else:
        restored = _restore_unjournaled(out, staging)
    shutil.rmtree(staging)
    return restored


def _restore_unjournaled(out: Path, staging: Path) -> bool:
    """A staging folder of a gate before the journal (manifest and outputs moved into
    ``replaced/``, then the new outputs in, then the manifest written): with no manifest in
    *out* and a complete previous gate in ``replaced/`` (its manifest and every output it
    lists), the new outputs go and the previous ones come back."""
    replaced = staging / "replaced"
    if (out / MANIFEST).exists() or not (replaced / MANIFEST).is_file():
        return False
    try:
        manifest = json.loads((replaced / MANIFEST).read_text(encoding="utf-8"))
        listed = {Path(manifest[f"{name}_path"]).name for name in OUTPUTS}
    except (ValueError, KeyError, TypeError):  # not a manifest: nothing to restore
        return False
    if not all(os.path.lexists(replaced / n) or os.path.lexists(out / n) for n in listed):
        return False
    trash = staging / "uncommitted"
    trash.mkdir()
    for entry in sorted(out.iterdir()):  # outputs moved in (the previous ones are elsewhere)
        moved_in = os.path.lexists(replaced / entry.name) or entry.name not in listed
        if moved_in and entry.name in _OUTPUT_NAMES:
            os.replace(entry, trash / entry.name)
    for entry in sorted(replaced.iterdir(), key=lambda p: p.name == MANIFEST):  # manifest last
        os.replace(entry, out / entry.name)
    return True


def _read_journal(path: Path) -> Journal:
    try:
        return Journal.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InputFormatError(str(path), None, field, error["msg"]) from None


def refuse_to_replace(out: Path, previous: Sequence[Path], dataset: Path) -> None:
    """Refuse an output folder whose outputs would replace what no gate wrote.

    *previous* is what a gate replaces in *out* (its manifest and outputs). A gate
    replaces the previous gate's outputs (a ``manifest.json`` of a gate beside them). It
    refuses, in one line (exit 2), a dataset that is one of its own outputs (a gate's
    ``admitted.jsonl`` gated again into the same folder: the input would be replaced by
    its own subset), and a folder holding files of those names with no gate manifest
    beside them (a project's own ``manifest.json``, data named ``admitted.jsonl``): they
    would be moved aside and removed.
    """
    source = dataset.resolve() if dataset.exists() else None
    for path in previous:
        resolved = path.resolve()
        if source is not None and (source == resolved or resolved in source.parents):
            raise UsageError(
                f"-o {out}: the gate would replace the dataset {dataset} with its own output "
                f"{path.name}; pass another -o"
            )
    present = [path for path in previous if os.path.lexists(path)]
    if present and not _gate_manifest(out / MANIFEST):
        names = ", ".join(path.name for path in present)
        raise UsageError(
            f"-o {out} holds {names}, which no fidelity gate wrote (no gate manifest.json "
            "beside it) and which the gate would replace; pass a new or empty folder"
        )


def _gate_manifest(path: Path) -> bool:
    """Whether *path* is a manifest a gate wrote (its run id, dataset digest and verdict)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"run_id", "dataset_sha256", "verdict"} <= data.keys()


def new_staging(out: Path) -> Path:
    """A fresh staging folder in *out* (hold :func:`output_lock` first)."""
    return Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))


def remove_staging(staging: Path) -> None:
    """Remove *staging*, unless an undo that failed left its journal (the next gate's)."""
    if not (staging / JOURNAL).exists():
        shutil.rmtree(staging, ignore_errors=False)


def install(out: Path, staging: Path, staged: Sequence[Path], previous: Sequence[Path]) -> None:
    """Rename *staged* (in *staging*) and then ``staging/manifest.json`` into *out*.

    Whatever of *previous* (a manifest and outputs, by their paths in *out*)
    exists is first moved into ``staging/replaced``, the manifest first, so
    *out* never holds a manifest beside outputs that are not its gate's. A
    failure, Ctrl-C or SIGTERM before the manifest's rename undoes the renames
    done; one after it is acted on once the install is over.
    """
    replaced = staging / "replaced"
    replaced.mkdir()
    renames = [
        (old.name, f"{staging.name}/replaced/{old.name}")
        for old in previous
        if os.path.lexists(old)
    ]
    renames += [(f"{staging.name}/{path.name}", path.name) for path in staged]
    renames.append((f"{staging.name}/{MANIFEST}", MANIFEST))
    journal = staging / JOURNAL
    with _HeldSignals() as held:
        _write_atomic(journal, Journal(staging=staging.name, renames=renames).model_dump_json())
        pause("journal")
        try:
            for source, target in renames:
                held.check()
                os.replace(out / source, out / target)
                pause(f"moved away {source}" if "/" in target else f"renamed {target}")
        except BaseException:
            roll_back(out, renames)
            journal.unlink()
            raise
        journal.unlink()


def roll_back(out: Path, renames: Sequence[tuple[str, str]]) -> int:
    """Undo the renames of an install that are done, last first; returns how many."""
    undone = 0
    for source, target in reversed(renames):
        if _done(out, source, target):
            os.replace(out / target, out / source)
            undone += 1
    return undone


def _committed(out: Path, renames: Sequence[tuple[str, str]]) -> bool:
    return _done(out, *renames[-1])


def _done(out: Path, source: str, target: str) -> bool:
    """Whether one rename of the journal is done: what it moves into the staging folder is
    there, what it moves out of it is not (the other end may be a path of the same name)."""
    if "/" in target:
        return os.path.lexists(out / target)
    return not os.path.lexists(out / source)


def _write_atomic(path: Path, text: str) -> None:
    """*path* written whole under a temporary name beside it, then renamed."""
    temp = path.with_name(f"{path.name}.tmp")
    with writing(temp):
        temp.write_text(text + "\n", encoding="utf-8")
    os.replace(temp, path)


class _HeldSignals:
    """SIGINT and SIGTERM recorded, not acted on, inside a ``with`` (main thread only).

    :meth:`check` raises ``KeyboardInterrupt`` for one recorded; one still recorded at
    the end is raised again under the handlers that were there before.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.previous: dict[int, Callable[[int, FrameType | None], Any] | int] = {}

    def __enter__(self) -> _HeldSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                before = signal.signal(signum, self._hold)
                self.previous[signum] = signal.SIG_DFL if before is None else before
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` when a signal came."""
        if self.pending:
            raise KeyboardInterrupt

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        if self.pending and not isinstance(error, KeyboardInterrupt):
            signal.raise_signal(self.pending[0])
