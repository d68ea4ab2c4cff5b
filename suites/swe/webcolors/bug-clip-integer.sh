# Plants a bug for the agent to find: integer rgb() values of 256 are not clipped to 255.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("src/webcolors/normalization.py")
text = path.read_text()
old, new = "return 0 if value < 0 else 255 if value > 255 else value", "return 0 if value < 0 else 255 if value > 256 else value"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
