"""The line-local built-in normalization rules, compiled (see ``_fastnorm.c``)."""

def rule_id(name: str, regex: str, replacement: str, flags: int, /) -> int: ...
def normalize(
    text: str,
    passes: tuple[tuple[int, ...], ...],
    names: tuple[str, ...],
    counts: dict[str, int],
    /,
) -> str | None: ...
def sequence_codes(a: str, b: str, lines: bool, /) -> tuple[str, str]: ...
