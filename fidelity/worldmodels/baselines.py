"""Baselines a real world model must beat.

- :class:`CopyBaseline` says the environment repeats itself: the previous
  observation again (an empty, successful one at depth 1).
- :class:`RetrievalBaseline` answers with the real observation of the most
  similar action seen elsewhere: TF-IDF over character n-grams of the rendered
  actions, cosine nearest neighbour, never from the trajectory being predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fidelity.errors import NotFoundError, UsageError
from fidelity.trajectory import Action, CommandAction, Observation, Step, Trajectory, stable_hash
from fidelity.worldmodels.base import WorldModel

if TYPE_CHECKING:
    import numpy as np

BASELINES = ("copy", "retrieval")
NGRAM_RANGE = (1, 4)
_TIE = 1e-9


class CopyBaseline(WorldModel):
    """Predicts that the last observation in *history* happens again.

    At depth 1 (or when no earlier step has an observation) it predicts empty
    output with exit code 0. Exit codes are kept only for command actions.
    """

    name = "baseline:copy"

    async def predict(
        self,
        trajectory: Trajectory,
        history: list[Step],
        action: Action,
        depth: int,
        sample: int = 0,
    ) -> Observation:
        """The most recent usable observation of *history*, copied."""
        is_command = isinstance(action, CommandAction)
        for step in reversed(history):
            seen = step.observation
            if seen is not None and not seen.failed:
                return Observation(
                    text=seen.text, exit_code=seen.exit_code if is_command else None, cwd=seen.cwd
                )
        return Observation(text="", exit_code=0 if is_command else None)


@dataclass(frozen=True)
class _Entry:
    trajectory_id: str
    domain: str
    depth: int
    document: str
    observation: Observation


def _index(corpus: list[Trajectory]) -> list[_Entry]:
    """Every step of *corpus* with a usable observation."""
    return [
        _Entry(t.id, str(t.domain), depth, step.action.render(), step.observation)
        for t in corpus
        for depth, step in enumerate(t.steps, start=1)
        if step.observation is not None and not step.observation.failed
    ]


class RetrievalBaseline(WorldModel):
    """Nearest recorded real action, by TF-IDF character n-grams and cosine similarity.

    The index holds the rendered action of every step of *corpus* that has a
    usable observation. A prediction only retrieves from trajectories of the
    same domain and never from the trajectory with the id being predicted
    (leave-one-trajectory-out). The index is sorted by (trajectory id, depth)
    and ties go to the first entry, so the answer does not depend on the corpus
    order. Raises :class:`~fidelity.errors.UsageError` when the corpus has no
    usable step.
    """

    name = "baseline:retrieval"

    def __init__(self, corpus: list[Trajectory]) -> None:
        self._entries = sorted(_index(corpus), key=lambda e: (e.trajectory_id, e.depth))
        documents = [e.document for e in self._entries]
        # NumPy and scikit-learn (0.7 s to import) only here: the copy baseline needs neither
        import numpy as np
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not documents:
            raise UsageError("the retrieval baseline needs a corpus with observed steps")
        self._vectorizer = TfidfVectorizer(
            analyzer="char", ngram_range=NGRAM_RANGE, lowercase=False, sublinear_tf=True
        )
        try:
            self._matrix = self._vectorizer.fit_transform(documents)
        except ValueError as error:  # every action empty: no n-gram at all
            raise UsageError(f"the retrieval corpus has no indexable action ({error})") from error
        self._ids = np.array([e.trajectory_id for e in self._entries], dtype=object)
        self._domains = np.array([e.domain for e in self._entries], dtype=object)
        self._corpus_hash = stable_hash([[e.trajectory_id, e.depth] for e in self._entries])

    async def predict(
        self,
        trajectory: Trajectory,
        history: list[Step],
        action: Action,
        depth: int,
        sample: int = 0,
    ) -> Observation:
        """The observation that followed the most similar action in another trajectory."""
        scores = self.similarities(action)
        eligible = (self._ids != trajectory.id) & (self._domains == str(trajectory.domain))
        if not eligible.any():
            error = NotFoundError(
                f"no {trajectory.domain} step outside trajectory "
                f"{trajectory.id!r} in the retrieval corpus"
            )
            return Observation(error=f"{type(error).__name__}: {error}")
        return self._entries[self._best(scores, eligible)].observation

    def similarities(self, action: Action) -> np.ndarray:
        """Cosine similarity of *action* to every indexed action (sorted by id, depth)."""
        query = self._vectorizer.transform([action.render()])
        import numpy as np

        # TF-IDF rows are L2-normalised, so the dot product is the cosine.
        return np.asarray((self._matrix @ query.T).toarray()).ravel()

    @staticmethod
    def _best(scores: np.ndarray, eligible: np.ndarray) -> int:
        """Index of the best eligible score; entries are sorted, so ties go to the first."""
        import numpy as np

        masked = np.where(eligible, scores, -np.inf)
        return int(np.flatnonzero(masked >= masked.max() - _TIE)[0])

    def describe(self) -> dict[str, str]:
        """Backend, corpus size and hash, vectoriser settings."""
        return {
            "backend": self.name,
            "corpus_steps": str(len(self._entries)),
            "corpus_hash": self._corpus_hash,
            "features": f"tfidf char {NGRAM_RANGE[0]}-{NGRAM_RANGE[1]}-grams, sublinear tf",
        }


def get_baseline(name: str, corpus: list[Trajectory] | None = None) -> WorldModel:
    """The baseline called *name* (``copy`` or ``retrieval``; retrieval needs *corpus*)."""
    if name == "copy":
        return CopyBaseline()
    if name == "retrieval":
        if not corpus:
            raise UsageError("the retrieval baseline needs a corpus of real trajectories")
        return RetrievalBaseline(corpus)
    raise UsageError(f"unknown baseline {name!r}; valid baselines: {', '.join(BASELINES)}")
