# Plants a bug for the agent to find: normalize_hex no longer expands three-digit colors.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("src/webcolors/normalization.py")
text = path.read_text()
old, new = "hex_digits = \"\".join(2 * s for s in hex_digits)", "hex_digits = \"\".join(s for s in hex_digits)"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
