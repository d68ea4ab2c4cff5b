# Plants a bug for the agent to find: check_hyphen_ok looks at the wrong positions for '--'.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("idna/core.py")
text = path.read_text()
old, new = "if label[2:4] == \x27--\x27:", "if label[1:3] == \x27--\x27:"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
