"""The search backend: tantivy and SQLite FTS5 over the Debian documentation corpus, and HTTP."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fidelity.sandboxes.base import Sandbox
from fidelity.sandboxes.search import SearchConfig, SearchSandbox
from fidelity.trajectory import EnvSpec, ToolAction
from tests.conftest import unavailable
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - backend-agnostic lifecycle

ENV = EnvSpec(backend="search")


@pytest.fixture(scope="module")
def corpus() -> Path:
    """The corpus of the installed Debian documentation, built once (``sandbox build``)."""
    from fidelity.sandboxes.search_corpus import build_corpus, sources

    if not sources():
        unavailable(
            "Debian python3.11-doc / dict-foldoc are not installed (scripts/bootstrap.sh tests)"
        )
    return build_corpus()


def call(tool: str, **args: object) -> ToolAction:
    return ToolAction(tool=tool, args=args)


@pytest.fixture
def sandbox(corpus: Path) -> Iterator[Sandbox]:
    box = SearchSandbox(SearchConfig(corpus=str(corpus)))
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def env() -> EnvSpec:
    return ENV


@pytest.fixture
def ok_action() -> ToolAction:
    return call("web_search", query="json")


@pytest.fixture
def bad_action() -> ToolAction:
    return call("web_search", queries=42)


@pytest.fixture
def dirty_actions() -> list[ToolAction]:
    return [call("dict_memory", action="add", key="k", value="v")]


@pytest.fixture
def probe_action() -> ToolAction:
    return call("dict_memory", action="retrieve_all")


@pytest.fixture
def leftovers() -> Callable[[Sandbox], list[str]]:
    def held(box: Sandbox) -> list[str]:
        assert isinstance(box, SearchSandbox)
        return ["engine"] if box._engine is not None else []

    return held


RESULT_RE = re.compile(
    r"^\[(\d+)\] (https://\S+)\nTitle: .+\nSnippet: .*\nDate: \S+$", re.MULTILINE
)


@pytest.mark.parametrize("engine", ["tantivy", "fts5"])
def test_web_search_gives_ten_results_in_the_benchmark_form(corpus: Path, engine: str) -> None:
    if engine == "tantivy" and not (corpus / "tantivy").is_dir():
        pytest.fail("the test extra installs tantivy: the corpus must carry its index")
    with SearchSandbox(SearchConfig(corpus=str(corpus), engine=engine)) as box:  # type: ignore[arg-type]
        box.reset(ENV)
        text = box.step(call("web_search", query="json encoder decoder"), timeout=30).text
    results = RESULT_RE.findall(text)
    assert [int(n) for n, _ in results] == list(range(1, 11)), text
    assert "https://docs.python.org/3.11/library/json.html" in [url for _, url in results]


@pytest.mark.parametrize("engine", ["tantivy", "fts5"])
def test_results_are_deterministic(corpus: Path, engine: str) -> None:
    texts = []
    for _ in range(2):
        with SearchSandbox(SearchConfig(corpus=str(corpus), engine=engine)) as box:  # type: ignore[arg-type]
            box.reset(ENV)
            texts.append(
                box.step(call("web_search", queries=["hash table", "lambda"]), timeout=30).text
            )
    assert texts[0] == texts[1]
    assert texts[0].count('Search results for "') == 2


def test_web_extractor_gives_the_page_and_an_error_for_an_unknown_url(sandbox: Sandbox) -> None:
    sandbox.reset(ENV)
    page = sandbox.step(
        call("web_extractor", url="https://docs.python.org/3.11/library/json.html"), timeout=30
    )
    assert page.exit_code == 0 and "json.dumps" in page.text and page.text.startswith("#")
    missing = sandbox.step(call("web_extractor", url="https://example.com/nothing"), timeout=30)
    assert missing.exit_code == 1 and missing.error is None and "not found" in missing.text


def test_foldoc_entries_are_pages_with_their_date(sandbox: Sandbox) -> None:
    sandbox.reset(ENV)
    text = sandbox.step(call("web_search", query="lambda calculus"), timeout=30).text
    assert "https://foldoc.org/lambda-calculus" in text


def test_dict_memory_operations(sandbox: Sandbox) -> None:
    sandbox.reset(ENV)

    def memory(**args: object) -> str:
        return sandbox.step(call("dict_memory", **args), timeout=30).text

    assert "Added" in memory(action="add", key="a", value="1")
    assert "already exists" in memory(action="add", key="a", value="2")
    assert "Updated" in memory(action="update", key="a", value="3")
    assert memory(action="retrieve", key="a") == "a: 3"
    memory(action="add", key="b", value="4")
    assert '"b": "4"' in memory(action="retrieve_all")
    assert "Removed key" in memory(action="remove", key="a")
    assert "not found" in memory(action="retrieve", key="a")
    assert "Removed all 1" in memory(action="remove_all")
    assert memory(action="retrieve_all") == "{}"
    assert "must be one of" in memory(action="forget")


def test_unknown_tool_is_an_error_observation(sandbox: Sandbox) -> None:
    sandbox.reset(ENV)
    observation = sandbox.step(call("web_browse", url="x"), timeout=30)
    assert observation.error is None and observation.exit_code == 1
    assert "unknown tool 'web_browse'" in observation.text


def test_reset_lists_the_tools(sandbox: Sandbox) -> None:
    first = sandbox.reset(ENV)
    assert first.state is not None
    assert [t["name"] for t in first.state["tools"]] == [
        "web_search",
        "web_extractor",
        "dict_memory",
    ]


def test_a_users_http_engine(corpus: Path) -> None:
    from fidelity.sandboxes.search_http import serve

    server = serve(corpus, "127.0.0.1", 0, engine="fts5")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        remote = SearchSandbox(SearchConfig(engine_url=url, engine="fts5"))
        local = SearchSandbox(SearchConfig(corpus=str(corpus), engine="fts5"))
        with remote, local:
            remote.reset(ENV)
            local.reset(ENV)
            for action in (
                call("web_search", query="socket"),
                call("web_extractor", url="https://foldoc.org/closure"),
            ):
                assert remote.step(action, timeout=30).text == local.step(action, timeout=30).text
            missing = remote.step(call("web_extractor", url="https://example.com/x"), timeout=30)
            assert "not found" in missing.text
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_engine_that_does_not_answer_is_an_infra_failure(
    closed_port_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIDELITY_SEARCH_ENGINE_URL", closed_port_url)  # as the CLI sets it
    with SearchSandbox() as box:
        box.reset(ENV)
        observation = box.step(call("web_search", query="x"), timeout=5)
        assert observation.error is not None and "SearchEngineError" in observation.error
        assert box.step(call("dict_memory", action="retrieve_all"), timeout=5).text == "{}"


def test_audit_domain_search_end_to_end(corpus: Path, tmp_path: Path) -> None:
    import subprocess

    import duckdb

    from fidelity.resources import default_suite
    from tests.conftest import audit_argv

    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(default_suite("search").read_text().splitlines()[:3]) + "\n")
    argv = audit_argv(tmp_path, suite, tmp_path / "f.duckdb", "search-e2e", "--domain", "search")
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=repo)
    assert done.returncode in (0, 1), done.stderr  # 1: the copy baseline fails the gate
    with duckdb.connect(str(tmp_path / "f.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (3,)
    assert "0 failed to replay" in done.stdout, done.stdout


SPHINX = """<html><head><title>json — JSON encoder and decoder &#8212; Python 3.11.2 documentation</title></head>
<body><div class="related">Navigation</div><div class="body" role="main">
<h1>json — JSON encoder<a class="headerlink" href="#x">¶</a></h1>
<p>Use <code>json.dumps</code> to encode.</p><pre>json.dumps([1, 2])</pre>
<ul><li>first</li><li>second</li></ul></div>
<div class="footer">Last updated on October 07, 2026.</div></body></html>"""


def test_corpus_builder_on_a_sphinx_page_cached_by_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fidelity.sandboxes import search_corpus

    docs = tmp_path / "html"
    (docs / "library").mkdir(parents=True)
    (docs / "library" / "json.html").write_text(SPHINX)
    monkeypatch.setattr(search_corpus, "PYTHON_DOCS", docs)
    monkeypatch.setattr(search_corpus, "FOLDOC", tmp_path / "no-foldoc")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = search_corpus.build_corpus()
    assert search_corpus.build_corpus() == folder  # cached
    page = search_corpus.python_page(docs / "library" / "json.html", "u")
    assert page is not None
    assert (page.title, page.date) == ("json — JSON encoder and decoder", "2026-10-07")
    assert page.body.startswith("# json — JSON encoder") and "¶" not in page.body
    assert "`json.dumps`" in page.body and "```\njson.dumps([1, 2])\n```" in page.body
    assert "- first" in page.body and "Navigation" not in page.body
    with SearchSandbox(SearchConfig(corpus=str(folder), engine="fts5")) as box:
        box.reset(ENV)
        text = box.step(call("web_search", query="encode"), timeout=30).text
    assert text.startswith("[1] https://docs.python.org/3.11/library/json.html\nTitle: json")
    (docs / "library" / "os.html").write_text(SPHINX.replace("json", "os"))
    assert search_corpus.corpus_dir() != folder  # another source set, another corpus
