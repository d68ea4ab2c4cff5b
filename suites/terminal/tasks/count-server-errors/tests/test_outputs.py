"""Terminal-Bench tests of the task: /app/errors.txt holds the number of 5xx responses."""

from pathlib import Path

ERRORS = Path("/app/errors.txt")
SERVER_ERRORS = 8  # the 5xx lines of /app/access.log as the image ships it


def test_errors_file_exists():
    assert ERRORS.is_file(), f"{ERRORS} was not written"


def test_errors_file_holds_the_count():
    assert ERRORS.read_text().strip() == str(SERVER_ERRORS)
