"""Typed world-model configs: ``endpoint | recorded | baseline``, told apart by ``type``.

Like the sandbox configs, they are plain data (a task carrying one can be
shipped to another process and :meth:`build` there) and they hold the one set
of defaults every command uses.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.defaults import MAX_RETRIES, MAX_TOKENS, REQUEST_DEADLINE, REQUEST_TIMEOUT, TOP_K

if TYPE_CHECKING:
    from fidelity.trajectory import Trajectory
    from fidelity.worldmodels.base import WorldModel

logger = logging.getLogger(__name__)


class EndpointConfig(BaseModel):
    """A model served behind an OpenAI-compatible endpoint (vLLM, SGLang, an API)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["endpoint"] = "endpoint"
    url: str = Field(description="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    model: str = Field(description="the served model's name")
    api_key: str = Field(
        default_factory=lambda: os.environ.get("FIDELITY_SIM_API_KEY", "EMPTY"), repr=False
    )
    timeout: float = Field(default=REQUEST_TIMEOUT, gt=0, description="seconds per request")
    max_retries: int = Field(default=MAX_RETRIES, ge=0)
    prompts_dir: Path | None = None
    cache: Path | None = Field(
        default=None, description="response cache (DuckDB file); None: no cache"
    )
    max_tokens: int | None = Field(default=MAX_TOKENS, ge=1)
    top_k: int | None = Field(
        default=TOP_K, ge=1, description="None: not sent (APIs that reject it)"
    )
    deadline: float = Field(
        default=REQUEST_DEADLINE,
        gt=0,
        description="seconds one request may take in all (--sim-timeout)",
    )
    sampling: Literal["recommended", "agentworldbench"] = Field(
        default="recommended",
        description="recommended: the model card's sampling; agentworldbench: exactly what the "
        "reference script sends (temperature and max_tokens only)",
    )

    def build(self, corpus: list[Trajectory] | None = None) -> WorldModel:
        """The endpoint's client (*corpus* is unused)."""
        from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel

        cache = None
        if self.cache is not None:
            from fidelity.worldmodels.cache import ResponseCache

            cache = ResponseCache(self.cache)
        logger.debug(
            "endpoint %s, model %s: %g s per attempt, %d retries, %g s per request in all, "
            "max_tokens %s, top_k %s, sampling %s, response cache %s",
            self.url,
            self.model,
            self.timeout,
            self.max_retries,
            self.deadline,
            self.max_tokens,
            self.top_k,
            self.sampling,
            self.cache or "off",
        )
        return OpenAICompatWorldModel(
            base_url=self.url,
            model=self.model,
            api_key=self.api_key,
            timeout=self.timeout,
            max_retries=self.max_retries,
            prompts_dir=self.prompts_dir,
            max_tokens=self.max_tokens,
            top_k=self.top_k,
            cache=cache,
            deadline=self.deadline,
            sampling=self.sampling,
        )

    def notice(self) -> str | None:
        """Nothing to tell: this is a real world model."""
        return None


class RecordedConfig(BaseModel):
    """A simulated dataset (JSONL) played back step by step."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["recorded"] = "recorded"
    data: Path = Field(description="the recorded simulated dataset")

    def build(self, corpus: list[Trajectory] | None = None) -> WorldModel:
        """The dataset's player (*corpus* is unused)."""
        from fidelity.formats.jsonl import read_trajectories
        from fidelity.worldmodels.recorded import RecordedWorldModel

        logger.debug("recorded world model: %s", self.data)
        return RecordedWorldModel(read_trajectories(self.data), str(self.data))

    def notice(self) -> str | None:
        """Nothing to tell: the dataset is the world model's own output."""
        return None


class BaselineConfig(BaseModel):
    """A built-in baseline: the floor any real world model must beat."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["baseline"] = "baseline"
    name: Literal["copy", "retrieval"] = "retrieval"

    @property
    def needs_real_corpus(self) -> bool:
        """The retrieval baseline indexes real replays, so they must come first."""
        return self.name == "retrieval"

    def build(self, corpus: list[Trajectory] | None = None) -> WorldModel:
        """The baseline, indexing *corpus* (real trajectories) when it retrieves."""
        from fidelity.worldmodels.baselines import get_baseline

        logger.debug(
            "baseline world model %r over %d real trajectories", self.name, len(corpus or [])
        )
        return get_baseline(self.name, corpus or [])

    def notice(self) -> str | None:
        """What to tell the user: no world model was given."""
        return (
            f"No world model given (--sim-url/--sim-data): simulating with the built-in "
            f"'{self.name}' baseline. Its scores are the floor a real world model must beat."
        )


WorldModelConfig = Annotated[
    EndpointConfig | RecordedConfig | BaselineConfig, Field(discriminator="type")
]
"""Any world model's config, told apart by ``type``."""


def needs_real_corpus(config: Any) -> bool:
    """True when *config* is a baseline that must index the run's real replays first."""
    return isinstance(config, BaselineConfig) and config.needs_real_corpus
