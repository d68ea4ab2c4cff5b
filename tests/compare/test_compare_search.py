"""SearchComparator: URL and title overlap, rank correlation, hallucinated URLs."""

from __future__ import annotations

import json

import pytest

from fidelity.compare import SearchComparator
from fidelity.compare.base import CompareContext
from fidelity.compare.search import canonical_date, kendall_tau, parse_results
from fidelity.trajectory import Observation, TextAction

CONTEXT = CompareContext(action=TextAction(text='search("python dataclass default factory")'))

RESULTS = [
    (
        "dataclasses — Data Classes — Python 3.12 documentation",
        "https://docs.python.org/3/library/dataclasses.html",
    ),
    ("PEP 557 – Data Classes", "https://peps.python.org/pep-0557/"),
    ("Python dataclass default_factory explained", "https://realpython.com/python-data-classes/"),
    (
        "How to use field(default_factory=list)? - Stack Overflow",
        "https://stackoverflow.com/questions/52063759",
    ),
]


def numbered(results: list[tuple[str, str]], fetched: str = "Nov 20 10:00") -> str:
    lines = [f"Search results (fetched {fetched}):", ""]
    for rank, (title, url) in enumerate(results, start=1):
        lines += [f"{rank}. {title}", f"   URL: {url}", "   A short snippet of the page.", ""]
    return "\n".join(lines)


def compare(real: str, sim: str):  # type: ignore[no-untyped-def]
    return SearchComparator().compare(Observation(text=real), Observation(text=sim), CONTEXT)


def test_same_results_another_time_do_not_drift() -> None:
    result = compare(numbered(RESULTS), numbered(RESULTS, fetched="Nov 21 08:13"))
    assert (result.score, result.drift, result.reasons) == (1.0, False, [])
    assert result.metrics["rank_corr"] == 1.0


def test_invented_url_is_a_hallucination() -> None:
    sim = [*RESULTS[:3], ("dataclass tips", "https://python-tricks.example.org/dataclass-factory")]
    result = compare(numbered(RESULTS), numbered(sim))
    assert result.drift
    assert "url:https://python-tricks.example.org/dataclass-factory" in result.hallucinations
    assert "url:https://stackoverflow.com/questions/52063759" in result.omissions
    assert result.metrics["url_f1"] == 0.75


def test_reordered_results_lower_rank_correlation() -> None:
    result = compare(numbered(RESULTS), numbered(RESULTS[::-1]))
    assert result.metrics["url_f1"] == 1.0
    assert result.metrics["rank_corr"] == 0.0
    assert result.drift and result.hallucinations == []


def test_json_and_markdown_forms_parse() -> None:
    data = json.dumps({"results": [{"title": t, "link": u} for t, u in RESULTS]})
    markdown = "\n".join(f"{i}. [{t}]({u})" for i, (t, u) in enumerate(RESULTS, start=1))
    parsed = [parse_results(t) for t in (data, markdown, numbered(RESULTS))]
    assert [[(r.title, r.url) for r in p] for p in parsed] == [RESULTS] * 3
    assert compare(data, markdown).score == 1.0


@pytest.mark.parametrize(
    ("real", "sim", "tau"),
    [
        ([0, 1, 2, 3], [0, 1, 2, 3], 1.0),
        ([0, 1, 2, 3], [3, 2, 1, 0], -1.0),
        ([0, 1, 2], [0, 2, 1], 1 / 3),
        ([0], [0], 1.0),
    ],
)
def test_kendall_tau(real: list[int], sim: list[int], tau: float) -> None:
    assert kendall_tau(real, sim) == pytest.approx(tau)


def awb_results(results: list[tuple[str, str]]) -> str:
    """AgentWorldBench's web_search layout: ``[n] URL`` then Title/Snippet/Date lines."""
    return "\n\n".join(
        f"[{n}] {url}\nTitle: {title}\nSnippet: A short snippet.\nDate: 2025-01-0{n}"
        for n, (title, url) in enumerate(results, start=1)
    )


def test_benchmark_result_layout_reads_titles_from_title_lines() -> None:
    parsed = parse_results(awb_results(RESULTS))
    assert [(r.title, r.url) for r in parsed] == RESULTS
    result = compare(awb_results(RESULTS), awb_results(RESULTS[:3]))
    assert result.metrics["title_sim"] == 1.0 and result.metrics["url_recall"] == 0.75


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# tantivy\n\nPython bindings for Tantivy.\u2028Install with pip.",  # web_extractor page
        "Memory updated: key 'plan' stored.",  # dict_memory message
    ],
)
def test_observations_without_a_result_list_compare_as_text(text: str) -> None:
    same = compare(text, text)
    assert same.score == 1.0 and not same.drift
    other = compare(text, "Something else entirely.")
    assert 0.0 <= other.score <= 1.0


def awb(results: list[tuple[str, str]], snippets: list[str], dates: list[str]) -> str:
    """The AgentWorldBench layout with the given snippets and dates."""
    return "\n\n".join(
        f"[{n}] {url}\nTitle: {title}\nSnippet: {snippet}\nDate: {date}"
        for n, ((title, url), snippet, date) in enumerate(
            zip(results, snippets, dates, strict=True), start=1
        )
    )


SNIPPETS = [
    "Added in version 3.7. The field() function takes default_factory.",
    "PEP 557 was accepted in 2017 for Python 3.7.",
    "A tutorial in 12 parts on data classes.",
    "Use field(default_factory=list) instead of a mutable default.",
]
DATES = ["2025-01-05", "2017-06-04", "2024-11-30", "2019-02-01"]


def test_snippets_and_dates_are_read_per_result() -> None:
    parsed = parse_results(awb(RESULTS, SNIPPETS, DATES))
    assert [(r.snippet, r.date, r.label) for r in parsed] == [
        (s, d, str(n)) for n, (s, d) in enumerate(zip(SNIPPETS, DATES, strict=True), start=1)
    ]
    same = compare(awb(RESULTS, SNIPPETS, DATES), awb(RESULTS, SNIPPETS, DATES))
    assert (same.drift, same.metrics["snippet_sim"], same.metrics["fields_changed"]) == (
        False,
        1.0,
        0.0,
    )


def test_changed_number_in_a_snippet_drifts() -> None:
    sim = [*SNIPPETS[:2], "A tutorial in 21 parts on data classes.", SNIPPETS[3]]
    result = compare(awb(RESULTS, SNIPPETS, DATES), awb(RESULTS, sim, DATES))
    assert result.drift
    assert "number:21" in result.hallucinations and "number:12" in result.omissions
    assert result.metrics["fields_changed"] == 1.0 and result.metrics["snippet_sim"] < 1.0


def test_line_added_to_a_result_is_part_of_its_snippet() -> None:
    real = awb(RESULTS, SNIPPETS, DATES)
    sim = real.replace(
        "Date: 2019-02-01", "Date: 2019-02-01\nSee https://logstats.example.dev/help for details."
    )
    result = compare(real, sim)
    assert result.drift and "url:https://logstats.example.dev/help" in result.hallucinations


def test_dates_compare_as_days_whatever_their_spelling() -> None:
    respelled = ["Jan 5, 2025", "4 Jun 2017", "November 30, 2024", "2019-02-01T08:00:00Z"]
    same = compare(awb(RESULTS, SNIPPETS, DATES), awb(RESULTS, SNIPPETS, respelled))
    assert (same.drift, same.reasons) == (False, [])
    other = [*DATES[:3], "2019-03-01"]
    moved = compare(awb(RESULTS, SNIPPETS, DATES), awb(RESULTS, SNIPPETS, other))
    assert moved.drift
    assert f"date of {RESULTS[3][1]}: 2019-02-01 != 2019-03-01" in moved.reasons


def test_changed_result_number_is_a_mismatch() -> None:
    real = awb(RESULTS, SNIPPETS, DATES)
    result = compare(real, real.replace("[2] ", "[19] "))
    assert result.drift and f"number of {RESULTS[1][1]}: [2] != [19]" in result.reasons


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("2026-10-07", "2026-10-07"),
        ("2026-10-07T12:00:00+02:00", "2026-10-07"),
        ("Oct 7, 2026", "2026-10-07"),
        ("7 October 2026", "2026-10-07"),
        (" Unknown ", "unknown"),
        ("", ""),
    ],
)
def test_canonical_date(text: str, day: str) -> None:
    assert canonical_date(text) == day


def test_changed_number_in_an_extracted_page_drifts() -> None:
    page = "# json\n\nThe default indent is 4 spaces.\n\nSee section 2 for dumps()."
    result = compare(page, page.replace("indent is 4", "indent is 8"))
    assert result.drift and "number:8" in result.hallucinations
    assert result.metrics["line_sim"] < 1.0


def test_query_headers_are_not_part_of_a_snippet() -> None:
    one = awb(RESULTS[:2], SNIPPETS[:2], DATES[:2])
    two = awb(RESULTS[2:], SNIPPETS[2:], DATES[2:])
    text = f'Search results for "a":\n\n{one}\n\nSearch results for "b":\n\n{two}'
    parsed = parse_results(text)
    assert [r.snippet for r in parsed] == SNIPPETS
