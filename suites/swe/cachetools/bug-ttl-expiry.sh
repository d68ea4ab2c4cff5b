# Plants a bug for the agent to find: TTLCache.expire keeps items that expire exactly now.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("src/cachetools/__init__.py")
text = path.read_text()
old, new = "while curr is not root and not (time < curr.expires):", "while curr is not root and time > curr.expires:"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
