"""PIDs known by what printed them (``action_pid``), whatever their digit count, on both sides:
inside bubblewrap's PID namespace ``echo bg=$!`` prints ``bg=3``."""

from __future__ import annotations

import pytest
from compare_samples import context, obs

from fidelity.compare import TerminalComparator
from fidelity.compare.normalize import Normalizer
from fidelity.compare.pids import ps_columns

PS = "    PID TTY          TIME CMD\n{a:>7} ?        00:00:00 bash\n{b:>7} ?        00:00:00 ps\n"
PS_EF = (
    "UID          PID    PPID  C STIME TTY          TIME CMD\n"
    "root           1       0  0 04:01 ?        00:00:00 bash\n"
    "root     {a:>6} {b:>7}  0 04:01 ?        00:00:00 ps -ef\n"
)

# (command, real output in a PID namespace, a simulated output with other PIDs)
SAME = [
    ("sleep 0.3 & echo bg=$!", "bg=3\n", "bg=48213\n"),
    ("sleep 0.3 & echo bg=$!", "bg=3\n", "bg=4\n"),
    ('sleep 1 & echo "started $! by $$"', "started 3 by 1\n", "started 4242 by 4240\n"),
    ("python3 -c 'import os; print(os.getpid())'", "5\n", "48213\n"),
    ("python3 -c 'import os; print(os.getpid())'", "5\n", "7\n"),
    ("python3 -c 'import os; print(\"worker\", os.getpid())'", "worker 5\n", "worker 912\n"),
    ("python3 -c 'import os; print(f\"{os.getpid()}\")'", "5\n", "31337\n"),
    ("echo $$", "1\n", "23817\n"),
    ("printf 'child %d\\n' $!", "child 3\n", "child 1200\n"),
    ("sleep 5 & pgrep sleep", "[1] 3\n4\n", "[1] 23817\n23818\n"),
    ("pgrep -l sleep", "3 sleep\n", "812 sleep\n"),
    ("pidof sleep", "4 3\n", "9001 9000\n"),
    ("sleep 9 & jobs -l", "[1]+     3 Running  sleep 9 &\n", "[1]+ 12345 Running  sleep 9 &\n"),
    ("ps", PS.format(a=1, b=6), PS.format(a=23817, b=23901)),
    ("ps -ef", PS_EF.format(a=7, b=1), PS_EF.format(a=142, b=1)),
]


@pytest.mark.parametrize(("command", "real", "sim"), SAME, ids=[c for c, _, _ in SAME])
def test_a_pid_printed_by_the_action_is_volatile_at_any_length(
    command: str, real: str, sim: str
) -> None:
    result = TerminalComparator().compare(obs(real), obs(sim), context(command))
    assert (result.drift, result.hallucinations, result.omissions) == (False, [], [])
    assert result.normalizations["action_pid"] >= 2  # both sides


# (command, real, sim): what is not a PID printed by the action stays content
CONTENT = [
    ("sleep 0.3 & echo bg=$!; echo items=3", "bg=3\nitems=3\n", "bg=4\nitems=4\n"),
    ("echo bg=$!", "bg=3 done\n", "bg=3 failed\n"),
    ("wc -l < notes.txt", "3\n", "4\n"),
    ("ls -la 2>&1 | wc -l", "5\n", "6\n"),
    ("ps", PS.format(a=1, b=6), PS.format(a=1, b=6).replace(" ps", " python")),
]


@pytest.mark.parametrize(("command", "real", "sim"), CONTENT, ids=[c for c, _, _ in CONTENT])
def test_other_numbers_and_lines_stay_content(command: str, real: str, sim: str) -> None:
    result = TerminalComparator().compare(obs(real), obs(sim), context(command))
    assert result.drift


def test_ps_columns_are_read_from_the_header() -> None:
    text, n = ps_columns(PS_EF.format(a=142, b=1))
    assert n == 4  # PID and PPID of both rows
    assert text.splitlines()[2] == "root <PID> <PID> 0 04:01 ? 00:00:00 ps -ef"
    assert ps_columns("no table here\n") == ("no table here\n", 0)


def test_without_a_pid_printer_a_bare_number_is_untouched() -> None:
    assert Normalizer()("3\n", "cat count.txt") == ("3\n", {})
