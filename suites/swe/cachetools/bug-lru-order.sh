# Plants a bug for the agent to find: LRUCache moves a used key to the wrong end, so it evicts the most recently used.
# Runs as env.setup in the repository; fails loudly if the code it edits has moved.
python3 - <<'PY'
from pathlib import Path
path = Path("src/cachetools/__init__.py")
text = path.read_text()
old, new = "self.__order.move_to_end(key)\n        except KeyError:\n            self.__order[key] = None\n\n\nclass MRUCache", "self.__order.move_to_end(key, last=False)\n        except KeyError:\n            self.__order[key] = None\n\n\nclass MRUCache"
assert text.count(old) == 1, f"{path}: expected one {old!r}"
path.write_text(text.replace(old, new))
PY
