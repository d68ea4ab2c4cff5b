"""Normalization rules: what each must rewrite, what none may touch, and the counts."""

from __future__ import annotations

import dataclasses
import re

import pytest
from compare_samples import OUTPUTS, Run

from fidelity.compare.normalize import (
    DEFAULT_RULES,
    RULES,
    TRUNCATED,
    Normalizer,
    Rule,
    merge_counts,
    normalize,
    rules_named,
    sort_lines,
    truncate,
)

# (rule, input, expected output): every rule rewrites these.
MUST_REWRITE = [
    ("ansi", "\x1b[31mFAILED\x1b[0m test_x", "FAILED test_x"),
    ("ansi", "\x1b]0;root@box: ~\x07$ ls", "$ ls"),
    ("ansi", "\x1b[1;32m✓\x1b[K done", "✓ done"),
    ("crlf", "line one\r\nline two\r\n", "line one\nline two\n"),
    (
        "carriage_return",
        "Downloading  10%\rDownloading  55%\rDownloading 100%\ndone",
        "Downloading 100%\ndone",
    ),
    ("carriage_return", "50%\r", "50%"),
    ("timestamp", "started 2026-11-20T23:55:57Z", "started <TIMESTAMP>"),
    ("timestamp", "2026-11-20T23:55:57.123456+00:00 INFO", "<TIMESTAMP> INFO"),
    ("timestamp", "2026-11-20 23:55:57,123 WARNING", "<TIMESTAMP> WARNING"),
    ("timestamp", "Date: 2026-11-20", "Date: <TIMESTAMP>"),
    ("timestamp", "backup-2026-11-20.tar.gz", "backup-<TIMESTAMP>.tar.gz"),
    (
        "timestamp",
        "-rw-r--r-- 1 root root 9 2026-11-20 23:55 x",
        "-rw-r--r-- 1 root root 9 <TIMESTAMP> x",
    ),
    ("timestamp", "[12:03:45] server ready", "[<TIMESTAMP>] server ready"),
    ("timestamp", "20 Nov 2026 23:55:57 +0000", "<TIMESTAMP>"),
    ("date", "Date: Fri, 20 Nov 2026 23:55:57 +0000", "Date: <TIMESTAMP>"),
    ("date", "Date:   Fri Nov 20 23:55:57 2026 +0000", "Date:   <TIMESTAMP>"),
    ("date", "Fri Nov 20 23:55:57 UTC 2026", "<TIMESTAMP>"),
    ("date", "Fri 20 Nov 2026 11:55:57 PM UTC", "<TIMESTAMP>"),
    (
        "date",
        "-rw-r--r-- 1 root root 220 Nov 20 23:55 .bashrc",
        "-rw-r--r-- 1 root root 220 <TIMESTAMP> .bashrc",
    ),
    (
        "date",
        "-rw-r--r-- 1 root root 512 Nov  3  2025 Makefile",
        "-rw-r--r-- 1 root root 512 <TIMESTAMP> Makefile",
    ),
    ("date", "Nov 20 23:55:57 box sshd", "<TIMESTAMP> box sshd"),
    ("epoch", "ts=1763682957", "ts=<TIMESTAMP>"),
    ("epoch", "1763682957123 ms since epoch", "<TIMESTAMP> ms since epoch"),
    ("epoch", "time.time() = 1763682957.123456", "time.time() = <TIMESTAMP>"),
    ("duration", "took 0.23s", "took <DURATION>"),
    ("duration", "took 12ms", "took <DURATION>"),
    ("duration", "took 12 ms", "took <DURATION>"),
    ("duration", "done in 1.4 seconds", "done in <DURATION>"),
    (
        "duration",
        "real\t0m0.012s\nuser\t0m0.004s\nsys\t0m0.000s",
        "real\t<DURATION>\nuser\t<DURATION>\nsys\t<DURATION>",
    ),
    ("duration", "Ran 3 tests in 0.001s", "Ran 3 tests in <DURATION>"),
    ("duration", "===== 3 passed in 0.12s =====", "===== 3 passed in <DURATION> ====="),
    ("duration", "elapsed 1h2m3s", "elapsed <DURATION>"),
    ("pid", "started worker pid 1234", "started worker pid <PID>"),
    ("pid", "PID: 12", "PID: <PID>"),
    ("pid", "pid=4321 exited", "pid=<PID> exited"),
    ("pid", "Process 1234 exited with code 1", "Process <PID> exited with code 1"),
    ("bracket_pid", "[1] 12345", "[1] <PID>"),
    ("bracket_pid", "Nov x sshd[1234]: Accepted", "Nov x sshd[<PID>]: Accepted"),
    ("uuid", "request 550e8400-e29b-41d4-a716-446655440000 ok", "request <UUID> ok"),
    ("uuid", "id=550E8400-E29B-41D4-A716-446655440000", "id=<UUID>"),
    ("hex_id", "commit 3f2a9c1b7e4d5f6a8b9c0d1e2f3a4b5c6d7e8f90", "commit <HEX>"),
    ("hex_id", "a1b2c3d Fix the parser", "<HEX> Fix the parser"),
    (
        "hex_id",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "sha256:<HEX>",
    ),
    ("hex_id", "Successfully built 3f2a9c1b7e4d", "Successfully built <HEX>"),
    ("hex_address", "<app.Foo object at 0x7f3b2c1d9e80>", "<app.Foo object at <ADDR>>"),
    ("temp_path", "wrote /tmp/tmpab12cd3x/out.txt", "wrote <TMP>/out.txt"),
    ("temp_path", "/tmp/pytest-of-root/pytest-3/test_a0/x", "<TMP>/test_a0/x"),
    ("temp_path", "dir=/tmp/tmp.Xa9bC3dE1f", "dir=<TMP>"),
    ("port", "Listening on http://localhost:8000/", "Listening on http://localhost:<PORT>/"),
    ("port", "connect 127.0.0.1:54321 and [::1]:80", "connect 127.0.0.1:<PORT> and [::1]:<PORT>"),
    ("hostname", "root@3f2a9c1b7e4d:/workspace# ls", "root@<HOST>:/workspace# ls"),
]

# Meaningful content no rule may touch.
MUST_KEEP = [
    "Python 3.11.2",
    "version 1.2.3 (build 42)",
    "total 48",
    "-rw-r--r-- 1 root root 4096 README.md",
    "  17 src/app.py\n 120 src/config.py\n 137 total",
    "1234567 lines, 1234567890 bytes, 12345678901 records",
    "collected 12 items",
    "deadbeef added facade cafe",
    "the 1990s were 10 years",
    "12 files changed, 3 insertions(+), 1 deletion(-)",
    "10:30 stand-up meeting",
    "main.c:10:5: error: expected ';'",
    '  File "/workspace/app.py", line 12, in <module>',
    "rapid 1234 mpid 5",
    "arr[1]: 2\nif x[0]:\n",
    "[2]+  Done                    sleep 1",
    "ZeroDivisionError: division by zero",
    "requests==2.31.0 numpy-1.26.4",
    "example.com:8080 and 10.0.0.1:22",
    "v1.2.3-4-gabc1234",
    "3.14159 and 2.71828",
]


@pytest.mark.parametrize(("rule", "text", "expected"), MUST_REWRITE)
def test_rule_rewrites(rule: str, text: str, expected: str) -> None:
    normalized, counts = normalize(text)
    assert normalized == expected
    assert counts.get(rule, 0) >= 1, counts


@pytest.mark.parametrize("text", MUST_KEEP)
def test_meaningful_content_is_kept(text: str) -> None:
    assert normalize(text) == (text, {})


@pytest.mark.parametrize(("rule", "text", "expected"), MUST_REWRITE)
def test_rule_alone_does_its_part(rule: str, text: str, expected: str) -> None:
    """Each rule works on its own too (no hidden dependency on another rule)."""
    alone, counts = normalize(text, rules=rules_named([rule]))
    assert counts.get(rule, 0) >= 1
    assert alone != text


def test_counts_every_substitution_per_rule() -> None:
    text = "pid 1 and pid 2\n2026-01-01 12:00:00 took 3.5s\n"
    assert normalize(text)[1] == {"pid": 2, "timestamp": 1, "duration": 1}


def test_normalization_is_idempotent() -> None:
    text = "\n".join(t for _, t, _ in MUST_REWRITE)
    once, _ = normalize(text)
    twice, counts = normalize(once)
    assert twice == once
    assert counts == {}


def test_placeholders_survive_later_rules() -> None:
    normalized, _ = normalize("<TIMESTAMP> <HEX> <PID> <DURATION>")
    assert normalized == "<TIMESTAMP> <HEX> <PID> <DURATION>"


def test_order_rule_sorts_lines_for_find_only() -> None:
    text = "./b.py\n./a.py\n./c/d.py\n"
    assert normalize(text, "find .") == ("./a.py\n./b.py\n./c/d.py\n", {"unordered_lines": 2})
    assert normalize(text, "cat list") == (text, {})
    assert normalize(text) == (text, {})


def test_sort_lines_counts_moved_lines() -> None:
    assert sort_lines("a\nb\n") == ("a\nb\n", 0)
    assert sort_lines("c\na\nb") == ("a\nb\nc", 3)


def test_truncation_is_counted_and_cuts_at_a_line_break() -> None:
    text = "x" * 10 + "\n" + "y" * 10
    cut, n = truncate(text, limit=15)
    assert (cut, n) == ("x" * 10 + "\n" + TRUNCATED, 1)
    assert truncate("short", limit=15) == ("short", 0)
    normalized, counts = normalize(text, limit=15)
    assert normalized.endswith(TRUNCATED)
    assert counts == {"truncate": 1}


def test_default_truncation_is_64k() -> None:
    big = "line\n" * 20_000
    normalized, counts = normalize(big)
    assert counts["truncate"] == 1
    assert len(normalized) <= 64 * 1024 + len(TRUNCATED)


def test_registry_names_are_unique_and_described() -> None:
    names = [r.name for r in DEFAULT_RULES]
    assert len(names) == len(set(names))
    assert set(RULES) == set(names)
    assert all(r.description for r in DEFAULT_RULES)


def test_rules_named_rejects_unknown_names() -> None:
    with pytest.raises(KeyError, match="no_such_rule"):
        rules_named(["pid", "no_such_rule"])


def test_custom_rule_set() -> None:
    rule = Rule("secret", r"sk-[A-Za-z0-9]{8,}", "<SECRET>", description="API keys")
    normalizer = Normalizer([rule, *DEFAULT_RULES])  # order matters: before hex_id
    assert normalizer("key sk-abcdef123456 at pid 3") == (
        "key <SECRET> at pid <PID>",
        {"pid": 1, "secret": 1},
    )


def test_fused_rules_reject_capturing_groups() -> None:
    first = Rule("a", r"(x)", "<A>", lead="[0-9]")
    second = Rule("b", r"y", "<B>", lead="[0-9]")
    with pytest.raises(ValueError, match="capturing groups"):
        Normalizer([first, second])


def test_merge_counts() -> None:
    assert merge_counts({"pid": 1}, {"pid": 2, "hex_id": 1}, {}) == {"pid": 3, "hex_id": 1}


def test_cached_results_match_and_large_texts_bypass_the_cache() -> None:
    normalizer = Normalizer(limit=100)
    text = "pid 12\n"
    assert normalizer.cached(text) == normalizer(text) == ("pid <PID>\n", {"pid": 1})
    assert normalizer.cached(text) is normalizer.cached(text)
    big = "pid 12\n" * 50
    assert normalizer.cached(big) is not normalizer.cached(big)
    normalizer.cache_clear()


def test_all_digit_short_commit_ids_in_git_output() -> None:
    text = "5816351 Fix percentile\n[main 0997741] Raise threshold\nUpdating 1234567..abcdef0\n"
    normalized, counts = normalize(text, "git log --oneline -n 3")
    assert (
        normalized == "<HEX> Fix percentile\n[main <HEX>] Raise threshold\nUpdating <HEX>..<HEX>\n"
    )
    assert counts["git_short_id"] == 3 and counts["hex_id"] == 1
    # outside git output a 7-digit number is a number, not an id
    assert normalize("5816351 bytes\n", "wc -c big.bin") == ("5816351 bytes\n", {})


def test_line_memo_gives_exactly_the_whole_text_result() -> None:
    """Clean-line skipping changes neither the text nor the counts, whatever came before."""
    texts = [text for _, text, _ in MUST_REWRITE] + list(MUST_KEEP)
    for builder_seed in range(3):
        run = Run(builder_seed)
        texts += [build(run) for _, build in OUTPUTS.values()]
    texts += ["\n".join(texts[i : i + 7]) for i in range(0, len(texts), 5)]
    whole = Normalizer(line_memo=False)
    memo = Normalizer()
    assert memo._line_passes and not whole._line_passes
    for _ in range(2):  # the second round finds most lines clean
        for text in texts:
            for command in (None, "find . -name '*.py'", "git log --oneline"):
                assert memo(text, command) == whole(text, command), text


def test_line_memo_stays_off_for_custom_rules_after_the_built_ins() -> None:
    late = Rule("late", r"a\nb", "<AB>", description="spans lines")
    normalizer = Normalizer([*DEFAULT_RULES, late])
    assert not normalizer._line_passes
    assert normalizer("x\na\nb\n") == ("x\n<AB>\n", {"late": 1})


def test_guards_never_change_a_result() -> None:
    """A rule's guard only skips texts the rule cannot match: no guard, same text and counts."""
    texts = [text for _, text, _ in MUST_REWRITE] + list(MUST_KEEP)
    for builder_seed in range(3):
        run = Run(builder_seed)
        texts += [build(run) for _, build in OUTPUTS.values()]
    # the spellings a guard lists, and near misses of each, next to what the rule rewrites
    texts += [
        f"{word} {sep} 4242"
        for word in ("pid", "PiD", "pID", "Process", "proc", "PROCESS")
        for sep in (":", "=", "#", "")
    ]
    texts += [
        f"http://{host}:8080/x"
        for host in (
            "localhost",
            "127.0.0.1",
            "0.0.0.0",
            "[::]",
            "[::1]",
            "LOCALHOST",
            "example.com",
        )
    ]
    unguarded = tuple(dataclasses.replace(rule, guard=()) for rule in DEFAULT_RULES)
    assert any(rule.guard for rule in DEFAULT_RULES)
    plain, guarded = Normalizer(unguarded, line_memo=False), Normalizer(line_memo=False)
    for text in texts:
        assert guarded(text) == plain(text), text
    for rule in DEFAULT_RULES:  # every match holds one of the guard's literals
        if rule.guard:
            regex = re.compile(rule.regex, rule.flags)
            for text in texts:
                for match in regex.finditer(text):
                    line = text[text.rfind("\n", 0, match.start()) + 1 : match.end() + 1]
                    assert any(g in line for g in rule.guard), (rule.name, line)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_diffs_blob_ids_are_content_not_volatile(compiled: bool) -> None:
    """A diff's ``index`` line hashes the file's content: kept; a commit id is still volatile."""
    text = "diff --git a/x.py b/x.py\nindex a59f0c8dcb..4b3e6d5e9f 100644\ncommit 3f2a9c81d0e4\n"
    normalizer = Normalizer(compiled=compiled, line_memo=compiled)
    assert normalizer(text, "git diff") == (
        "diff --git a/x.py b/x.py\nindex a59f0c8dcb..4b3e6d5e9f 100644\ncommit <HEX>\n",
        {"hex_id": 1},
    )
