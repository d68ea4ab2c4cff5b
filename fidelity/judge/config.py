"""The LLM judge's configuration: where the judge runs and what it sees.

Plain data on the lowest floor of the judge (:mod:`fidelity.judging` judges one
step, :mod:`fidelity.judge` a stored run): a trajectory task carries it
(:mod:`fidelity.task`) without importing the judge's client.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fidelity.defaults import (
    JUDGE_CONCURRENCY,
    MAX_RETRIES,
    MAX_TOKENS,
    REQUEST_DEADLINE,
    REQUEST_TIMEOUT,
)


class JudgeConfig(BaseModel):
    """Where the judge runs and what it sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, description="OpenAI-compatible base URL (…/v1)")
    model: str = Field(min_length=1)
    api_key: str = "EMPTY"
    concurrency: int = Field(default=JUDGE_CONCURRENCY, ge=1)
    limit: int | None = Field(default=None, ge=1, description="judge at most this many steps")
    timeout: float = Field(default=REQUEST_TIMEOUT, gt=0)
    max_retries: int = Field(default=MAX_RETRIES, ge=0)
    deadline: float = Field(
        default=REQUEST_DEADLINE, gt=0, description="seconds per request in all"
    )
    backoff_base: float = Field(default=0.5, ge=0)
    max_tokens: int = Field(default=MAX_TOKENS, ge=1)
    temperature: float = Field(default=0.6, ge=0, description="the reference judge's temperature")
    history_steps: int | None = Field(
        default=None,
        ge=0,
        description="earlier steps shown (latest ones); None: all, as the reference",
    )
    max_chars: int | None = Field(
        default=None, ge=200, description="characters shown per observation; None: uncut"
    )
    prompts_dir: Path | None = Field(default=None, description="prompts folder holding judge/")
    cache: Path | None = Field(default=None, description="response cache (DuckDB); None: off")

    def describe(self) -> dict[str, str]:
        """What is stored with each judgment (no API key)."""
        return {
            "url": self.url,
            "model": self.model,
            "temperature": str(self.temperature),
            "history_steps": str(self.history_steps),
            "max_chars": str(self.max_chars),
            "prompts": str(self.prompts_dir or "bundled"),
        }
