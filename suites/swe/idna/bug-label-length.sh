# Plants a bug for the agent to find: labels of 64 characters pass the length check.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("idna/core.py")
text = path.read_text()
old, new = "    if len(label) > 63:\n        return False\n    return True\n\n\ndef valid_string_length", "    if len(label) > 64:\n        return False\n    return True\n\n\ndef valid_string_length"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
