"""The ``search`` backend: a real full-text engine over a real offline corpus.

This measures fidelity to *this* engine and corpus (Debian documentation
mapped to public URLs, :mod:`fidelity.sandboxes.search_corpus`), not to a
commercial web search. Tools, as AgentWorldBench's search domain names them:

- ``web_search`` ``{"query": q}`` or ``{"queries": [q, …]}``: ten results per query,
  each ``[n] URL`` then ``Title:``, ``Snippet:``, ``Date:`` lines;
- ``web_extractor`` ``{"url": u}``: the stored page as markdown, an error for an unknown URL;
- ``dict_memory`` ``{"action": add|update|retrieve|retrieve_all|remove|remove_all, "key", "value"}``:
  the trajectory's own key-value memory (empty at reset).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from fidelity.errors import SandboxError
from fidelity.sandboxes.base import Sandbox, track, untrack
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.search_engines import Engine, Hit, open_engine
from fidelity.trajectory import Action, EnvSpec, Observation, ToolAction

ENGINE_URL_ENV = "FIDELITY_SEARCH_ENGINE_URL"
"""Environment variable naming an HTTP search service (the CLI's way to set ``engine_url``)."""
MAX_PAGE = 20_000
"""Characters of a page ``web_extractor`` returns (the rest is cut, and says so)."""
MEMORY_ACTIONS = ("add", "update", "retrieve", "retrieve_all", "remove", "remove_all")

TOOLS: list[dict[str, Any]] = [
    {
        "name": "web_search",
        "description": "Search the web; ten results per query (URL, title, snippet, date).",
        "parameters": {
            "type": "object",
            "properties": {
                "queries": {"type": "array", "items": {"type": "string"}},
                "query": {"type": "string"},
            },
        },
    },
    {
        "name": "web_extractor",
        "description": "Fetch a web page and return its content as markdown.",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
        },
    },
    {
        "name": "dict_memory",
        "description": "A key-value memory: add, update, retrieve, retrieve_all, remove, remove_all.",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(MEMORY_ACTIONS)},
                "key": {"type": "string"},
                "value": {"type": "string"},
            },
            "required": ["action"],
        },
    },
]


class SearchConfig(SandboxConfigBase):
    """Options of the ``search`` backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["search"] = "search"
    engine: Literal["auto", "tantivy", "fts5"] = "auto"
    corpus: str | None = Field(
        default=None, description="a built corpus folder (default: the cached one)"
    )
    engine_url: str | None = Field(
        default_factory=lambda: os.environ.get(ENGINE_URL_ENV) or None,
        description=f"the user's HTTP search service instead of a local engine (${ENGINE_URL_ENV})",
    )
    results: int = Field(default=10, ge=1, le=100)


class SearchSandbox(Sandbox):
    """web_search / web_extractor / dict_memory against a real engine."""

    name = "search"

    def __init__(self, config: SearchConfig | None = None) -> None:
        self.config = config or SearchConfig()
        self._engine: Engine | None = None
        self._memory: dict[str, str] = {}
        self._closed = False
        self._lock = threading.Lock()

    def reset(self, env: EnvSpec) -> Observation:
        """An empty memory (the engine stays open); the observation lists the tools."""
        with self._lock:
            if self._engine is None:
                folder = None
                if self.config.engine_url is None:
                    from fidelity.sandboxes.search_corpus import build_corpus

                    folder = Path(self.config.corpus) if self.config.corpus else build_corpus()
                self._engine = open_engine(self.config.engine, folder, self.config.engine_url)
            self._memory = {}
            self._closed = False
            track(self)
        return Observation(text="", state={"tools": TOOLS, "engine": self._engine.name})

    def close(self) -> None:
        """Close the engine (idempotent)."""
        with self._lock:
            self._closed = True
            if self._engine is not None:
                self._engine.close()
                self._engine = None
            untrack(self)

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run one tool call; a bad call is an error observation, as a harness shows it."""
        engine = self._engine
        if self._closed or engine is None:
            raise SandboxError("search sandbox is closed (or was never reset)")
        if not isinstance(action, ToolAction):
            return _error(f"the search backend runs tool calls, not {action.type!r} actions")
        try:
            if action.tool == "web_search":
                return self._web_search(engine, action.args)
            if action.tool == "web_extractor":
                return self._web_extractor(engine, action.args)
        except SandboxError as exc:  # the engine failed, not the call: an infra failure
            return Observation(error=f"SearchEngineError: {exc}")
        if action.tool == "dict_memory":
            return self._dict_memory(action.args)
        names = ", ".join(tool["name"] for tool in TOOLS)
        return _error(f"unknown tool {action.tool!r}; available tools: {names}")

    def _web_search(self, engine: Engine, args: dict[str, Any]) -> Observation:
        queries = args.get("queries", args.get("query"))
        if isinstance(queries, str):
            queries = [queries]
        if (
            not isinstance(queries, list)
            or not queries
            or not all(isinstance(q, str) and q.strip() for q in queries)
        ):
            return _error("web_search needs 'query' (a string) or 'queries' (a list of strings)")
        blocks = [
            render_results(q, engine.search(q, self.config.results), len(queries) > 1)
            for q in queries
        ]
        return Observation(text="\n\n".join(blocks), exit_code=0)

    def _web_extractor(self, engine: Engine, args: dict[str, Any]) -> Observation:
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            return _error("web_extractor needs 'url' (a string)")
        page = engine.page(url.strip())
        if page is None:
            return _error(f"could not fetch {url}: page not found")
        body = page.body
        truncated = len(body) > MAX_PAGE
        if truncated:
            body = body[:MAX_PAGE] + "\n\n[... content truncated ...]"
        return Observation(text=body, exit_code=0, truncated=truncated)

    def _dict_memory(self, args: dict[str, Any]) -> Observation:
        action = args.get("action", args.get("operation"))
        key, value = args.get("key"), args.get("value")
        if action not in MEMORY_ACTIONS:
            return _error(f"dict_memory 'action' must be one of: {', '.join(MEMORY_ACTIONS)}")
        if action == "retrieve_all":
            return Observation(
                text=json.dumps(self._memory, ensure_ascii=False, indent=2), exit_code=0
            )
        if action == "remove_all":
            count = len(self._memory)
            self._memory.clear()
            return Observation(text=f"Removed all {count} entries from memory.", exit_code=0)
        if not isinstance(key, str) or not key:
            return _error(f"dict_memory {action} needs 'key' (a string)")
        return self._memory_on_key(action, key, value)

    def _memory_on_key(self, action: str, key: str, value: Any) -> Observation:
        if action in {"add", "update"}:
            if value is None:
                return _error(f"dict_memory {action} needs 'value'")
            if action == "add" and key in self._memory:
                return _error(f"key {key!r} already exists; use update")
            if action == "update" and key not in self._memory:
                return _error(f"key {key!r} not found; use add")
            self._memory[key] = (
                value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            )
            verb = "Added" if action == "add" else "Updated"
            return Observation(text=f"{verb} key {key!r} in memory.", exit_code=0)
        if key not in self._memory:
            return _error(f"key {key!r} not found in memory")
        if action == "retrieve":
            return Observation(text=f"{key}: {self._memory[key]}", exit_code=0)
        del self._memory[key]
        return Observation(text=f"Removed key {key!r} from memory.", exit_code=0)


def render_results(query: str, hits: list[Hit], header: bool) -> str:
    """One query's results: ``[n] URL`` then ``Title:``, ``Snippet:``, ``Date:`` lines."""
    lines = [f'Search results for "{query}":', ""] if header else []
    if not hits:
        lines.append(f'No results found for "{query}".')
    for number, hit in enumerate(hits, 1):
        lines += [f"[{number}] {hit.url}", f"Title: {hit.title}", f"Snippet: {hit.snippet}"]
        lines += [f"Date: {hit.date or 'unknown'}", ""]
    return "\n".join(lines).rstrip("\n")


def _error(message: str) -> Observation:
    return Observation(text=f"Error: {message}", exit_code=1)


def build(config: SearchConfig | None = None) -> SearchSandbox:
    """A sandbox of this backend (the registry's builder)."""
    return SearchSandbox(config)


def sweep(owner: int | None = None) -> int:
    """Nothing outlives a search sandbox (no process, no temp folder): always 0."""
    del owner  # the registry passes a dead owner to every sweeper
    return 0


"""This backend's config model (the registry builds it from the audit's options)."""
