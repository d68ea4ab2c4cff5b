"""The search comparator: ranked result lists.

Accepted forms: a JSON list of results, or an object holding one under
``results``/``organic``/``organic_results``/``items``/``web``/``data`` (each result an
object with ``title`` and ``url``/``link``/``href``); or numbered text results
(``1. Title`` / ``[1] Title`` / ``1. [Title](url)``, the URL on the same line or
the lines after it, before the next number), including AgentWorldBench's
``web_search`` layout: ``[n] URL`` then ``Title:``, ``Snippet:`` and ``Date:``
lines (the ``Title:`` line gives the title, the ``Date:`` line the date, every other
line of the result its snippet). Extracted pages (``web_extractor`` Markdown) and
``dict_memory`` messages have no result list and are compared as terminal text
(line, token and character similarity, number/identifier/URL entities); no input
raises.

Metrics (in [0, 1]):

- ``url_precision`` / ``url_recall`` / ``url_f1``: over the sets of result URLs;
- ``title_sim``: mean rapidfuzz ratio between the titles of results sharing a URL;
- ``rank_corr``: Kendall's tau (tau-a, implemented here, O(n²) on at most a few
  dozen results) between the ranks of the common URLs, mapped from [-1, 1] to [0, 1];
  1 when fewer than two URLs are common;
- ``snippet_sim``: mean rapidfuzz ratio between the snippets of results sharing a URL;
- ``fields_changed``: how many titles, snippets, dates and shown numbers (``[n]``)
  differ between results sharing a URL (dates compared as calendar days, whatever
  their format);
- ``score`` = 0.5 × url_f1 + 0.25 × title_sim + 0.25 × rank_corr.

Entities: ``url:`` of each result (hallucinated URLs are the headline),
``title:`` of each result, and the terminal entities (numbers, identifiers,
file names, URLs) one snippet of a shared URL has and the other lacks. A
changed date or shown number is a hard mismatch. Drift: the shared structured
rule (threshold 0.9), made stricter by ``calibration/search.json``. Text without
results on either side is compared as terminal text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from itertools import combinations
from typing import Any, NamedTuple

from rapidfuzz import fuzz

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration.apply import calibrated, calibration_for
from fidelity.compare.config import CompareConfig
from fidelity.compare.structured import ItemComparator, overlap, verdict
from fidelity.compare.terminal import entity_diff
from fidelity.trajectory import Observation

_NUMBERED_RE = re.compile(r"^[ \t]*(?:\[\d+\]|\d+[.)])[ \t]+(.+)$", re.MULTILINE)
_URL_RE = re.compile(r"https?://[^\s<>\"')\]]+")
_TITLE_LINE_RE = re.compile(r"^[ \t]*Title:[ \t]*(.*)$", re.MULTILINE)
_DATE_LINE_RE = re.compile(r"^[ \t]*Date:[ \t]*(.*)$", re.MULTILINE)
_LABEL_RE = re.compile(r"^[ \t]*(?:\[(\d+)\]|(\d+)[.)])")
# Lines of a result block that are not its snippet: its fields, the next query's header.
_FIELD_RE = re.compile(r"^[ \t]*(?:Title:|Date:|URL:|Search results for )", re.IGNORECASE)
_SNIPPET_PREFIX_RE = re.compile(r"^[ \t]*Snippet:[ \t]*", re.MULTILINE)
_ISO_DAY_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_DATE_FORMATS = ("%b %d, %Y", "%B %d, %Y", "%d %b %Y", "%d %B %Y", "%Y/%m/%d", "%m/%d/%Y")
_SNIPPET_KEYS = ("snippet", "description", "content", "summary")
_MD_LINK_RE = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")
_LIST_KEYS = ("results", "organic", "organic_results", "items", "web", "data")
_URL_KEYS = ("url", "link", "href")


class Result(NamedTuple):
    """One search result: title and URL, and where shown its snippet, date and number."""

    title: str
    url: str
    snippet: str = ""
    date: str = ""
    label: str = ""


def canonical_date(text: str) -> str:
    """*text* as ``YYYY-MM-DD`` when it is a date (ISO, ``Nov 20, 2026``, ``20 Nov 2026``…).

    Anything else comes back stripped and lower-cased (``unknown``), so two
    spellings of one day are equal and two different days are not.
    """
    text = text.strip()
    iso = _ISO_DAY_RE.match(text)
    if iso:
        return "-".join(iso.groups())
    for form in _DATE_FORMATS:
        try:
            return datetime.strptime(text, form).date().isoformat()
        except ValueError:
            continue
    return text.lower()


def parse_results(text: str) -> list[Result]:
    """The ranked results of *text* (JSON or numbered text); empty when none."""
    stripped = text.strip()
    if stripped[:1] in {"[", "{"}:
        try:
            return _json_results(json.loads(stripped))
        except (json.JSONDecodeError, RecursionError):
            pass
    return _text_results(text)


def _json_results(data: Any) -> list[Result]:
    if isinstance(data, dict):
        data = next((data[k] for k in _LIST_KEYS if isinstance(data.get(k), list)), [])
    if not isinstance(data, list):
        return []
    results = []
    for item in data:
        if isinstance(item, dict):
            url = next((str(item[k]) for k in _URL_KEYS if item.get(k)), "")
            snippet = next((str(item[k]) for k in _SNIPPET_KEYS if item.get(k)), "")
            title = str(item.get("title") or item.get("name") or "")
            results.append(Result(title, url, snippet, canonical_date(str(item.get("date") or ""))))
    return results


def _text_results(text: str) -> list[Result]:
    matches = list(_NUMBERED_RE.finditer(text))
    results = []
    ends = [m.start() for m in matches[1:]] + ([len(text)] if matches else [])
    for match, end in zip(matches, ends, strict=True):
        block = text[match.start() : end]
        head, body = match[1], _body(text[match.end() : end])
        label = _LABEL_RE.match(block)
        number = (label[1] or label[2]) if label else ""
        dated = _DATE_LINE_RE.search(block)
        date = canonical_date(dated[1]) if dated else ""
        link = _MD_LINK_RE.search(head)
        if link:
            results.append(Result(link[1].strip(), link[2], body, date, number))
            continue
        url = _URL_RE.search(block)
        title = _URL_RE.sub("", head).strip(" -–—|:")
        labelled = _TITLE_LINE_RE.search(block)
        if labelled and (not title or title.startswith("Title:")):
            title = labelled[1].strip()
        results.append(Result(title, url[0].rstrip(".,;") if url else "", body, date, number))
    return results


def _body(rest: str) -> str:
    """The snippet of a result: its lines after the first, less its fields and query headers."""
    lines = (line.strip() for line in rest.split("\n"))
    kept = [
        _SNIPPET_PREFIX_RE.sub("", line) for line in lines if line and not _FIELD_RE.match(line)
    ]
    return "\n".join(kept)


def kendall_tau(real_ranks: list[int], sim_ranks: list[int]) -> float:
    """Kendall's tau-a between two rankings of the same items (1.0 for fewer than two)."""
    n = len(real_ranks)
    if n < 2:
        return 1.0
    score = 0
    for i, j in combinations(range(n), 2):
        a, b = real_ranks[i] - real_ranks[j], sim_ranks[i] - sim_ranks[j]
        score += (a * b > 0) - (a * b < 0)
    return score / (n * (n - 1) / 2)


def result_entities(results: list[Result]) -> set[str]:
    """``url:`` and ``title:`` entities of *results*."""
    found = {"url:" + r.url for r in results if r.url}
    found.update("title:" + r.title for r in results if r.title)
    return found


class SearchComparator(ItemComparator[Result]):
    """Compares search result lists (the ``search`` domain); fixed threshold, see the module doc."""

    domain = "search"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        config: CompareConfig | None = None,
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        super().__init__(threshold, config=config)
        self.calibration = calibration_for(self.domain, threshold, config, calibrated)

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """The structured verdict, decided by the shipped calibration when there is one."""
        return calibrated(self.calibration, super().compare(real, sim, context))

    def parse(self, observation: Observation) -> tuple[list[Result], dict[str, int]]:
        """The results of *observation* (titles normalized) and the normalizations that fired."""
        counts: Counter[str] = Counter()
        results = []
        for result in parse_results(observation.text):
            title, fired = self.normalizer.cached(result.title)
            snippet, more = self.normalizer.cached(result.snippet)
            counts.update(fired)
            counts.update(more)
            results.append(result._replace(title=title, snippet=snippet))
        return results, dict(counts)

    def item_entities(self, items: list[Result]) -> set[str]:
        """``url:`` and ``title:`` entities of *items*."""
        return result_entities(items)

    def score_items(
        self,
        real: list[Result],
        sim: list[Result],
        context: CompareContext,
        normalizations: dict[str, int],
    ) -> StepComparison:
        """URL overlap, title and snippet similarity, rank correlation, changed fields, entities."""
        precision, recall, f1 = overlap(
            Counter({r.url for r in real if r.url}), Counter({r.url for r in sim if r.url})
        )
        titles, rank = _title_and_rank(real, sim)
        pairs = _shared(real, sim)
        snippets = _snippet_sim(pairs)
        real_e, sim_e = result_entities(real), result_entities(sim)
        snippet_sim_only, snippet_real_only = _snippet_entities(pairs)
        mismatches = _field_mismatches(pairs)
        changed = sum(a.title != b.title for a, b in pairs) + sum(
            a.snippet != b.snippet for a, b in pairs
        )
        return verdict(
            score=0.5 * f1 + 0.25 * titles + 0.25 * rank,
            threshold=self.threshold,
            metrics={
                "url_precision": precision,
                "url_recall": recall,
                "url_f1": f1,
                "title_sim": titles,
                "rank_corr": rank,
                "snippet_sim": snippets,
                "fields_changed": float(changed + len(mismatches)),
            },
            sim_only=(sim_e - real_e) | (snippet_sim_only - real_e),
            real_only=(real_e - sim_e) | (snippet_real_only - sim_e),
            context=context,
            normalizations=normalizations,
            mismatches=mismatches,
        )


def _shared(real: list[Result], sim: list[Result]) -> list[tuple[Result, Result]]:
    """``(real, sim)`` results sharing a URL (each URL's first result), in real order."""
    sim_by_url: dict[str, Result] = {}
    for result in sim:
        if result.url:
            sim_by_url.setdefault(result.url, result)
    seen: set[str] = set()
    pairs = []
    for result in real:
        if result.url in sim_by_url and result.url not in seen:
            seen.add(result.url)
            pairs.append((result, sim_by_url[result.url]))
    return pairs


def _snippet_entities(pairs: list[tuple[Result, Result]]) -> tuple[set[str], set[str]]:
    """Terminal entities (numbers, identifiers, files, URLs) only one snippet of a pair has."""
    sim_only: set[str] = set()
    real_only: set[str] = set()
    for a, b in pairs:
        if a.snippet != b.snippet:
            found_sim, found_real = entity_diff(a.snippet, b.snippet)
            sim_only |= found_sim
            real_only |= found_real
    return sim_only, real_only


def _snippet_sim(pairs: list[tuple[Result, Result]]) -> float:
    """Mean similarity of the snippets of shared results (1 when there are none)."""
    if not pairs:
        return 1.0
    return sum(fuzz.ratio(a.snippet, b.snippet) / 100 for a, b in pairs) / len(pairs)


def _field_mismatches(pairs: list[tuple[Result, Result]]) -> list[str]:
    """Hard mismatches of shared results: another date, another shown number."""
    found = []
    for a, b in pairs:
        if a.date and b.date and a.date != b.date:
            found.append(f"date of {a.url}: {a.date} != {b.date}")
        if a.label and b.label and a.label != b.label:
            found.append(f"number of {a.url}: [{a.label}] != [{b.label}]")
    return found


def _title_and_rank(real: list[Result], sim: list[Result]) -> tuple[float, float]:
    """Mean title similarity over shared URLs, and Kendall's tau mapped to [0, 1]."""
    real_rank = {r.url: i for i, r in reversed(list(enumerate(real))) if r.url}
    sim_rank = {r.url: i for i, r in reversed(list(enumerate(sim))) if r.url}
    common = [u for u in real_rank if u in sim_rank]
    if not common:  # no URL on either side: nothing to disagree about
        return (1.0, 1.0) if not real_rank and not sim_rank else (0.0, 0.0)
    titles = [fuzz.ratio(real[real_rank[u]].title, sim[sim_rank[u]].title) / 100 for u in common]
    tau = kendall_tau([real_rank[u] for u in common], [sim_rank[u] for u in common])
    return sum(titles) / len(titles), (tau + 1) / 2
