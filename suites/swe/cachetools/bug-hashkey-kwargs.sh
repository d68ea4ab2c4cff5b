# Plants a bug for the agent to find: hashkey depends on the order keyword arguments were given in.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("src/cachetools/keys.py")
text = path.read_text()
old, new = "return _HashedTuple(args + sum(sorted(kwargs.items()), _kwmark))", "return _HashedTuple(args + sum(kwargs.items(), _kwmark))"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
