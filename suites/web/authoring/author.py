"""Author suites/web/suite.jsonl: intents resolved to bids against the real sites.

Run from the repository root: PYTHONPATH=suites/web/authoring .venv/bin/python suites/web/authoring/author.py suites/web/suite.jsonl
Only some trajectories (to append them): author.py OUT.jsonl ID-PREFIX...
"""
import json, re, sys
from fidelity.trajectory import BrowserAction, EnvSpec
from fidelity.sandboxes.browser import BrowserSandbox
from specs import SPECS

def find(text, role, name, nth=0):
    pat = re.compile(r"^\s*\[([^\]]+)\] " + re.escape(role) + (r" '" + (name[3:] if name.startswith("re:") else re.escape(name.replace("'", "\\'"))) + r"'" if name is not None else "") + r"(,|$)", re.M)
    hits = pat.findall(text)
    if len(hits) <= nth:
        raise SystemExit(f"not found: {role} {name!r}\n{text[:3000]}")
    return hits[nth][0]

def resolve(intent, text):
    if isinstance(intent, str):
        return intent
    kind, role, name, *rest = intent
    nth = 0
    if rest and isinstance(rest[-1], int) and kind != "press":
        nth = rest.pop()
    bid = find(text, role, name, nth)
    args = ", ".join([repr(bid), *map(repr, rest)])
    return f"{kind}({args})"

out = []
sb = BrowserSandbox()
try:
    for tid, project, desc, intents in SPECS:
        if sys.argv[2:] and not tid.startswith(tuple(sys.argv[2:])):
            continue
        obs = sb.reset(EnvSpec(backend="browser", project=project, description=desc))
        actions = []
        for intent in intents:
            action = resolve(intent, obs.text)
            obs = sb.step(BrowserAction(action=action))
            actions.append(action)
        err = obs.state["last_action_error"]
        print(tid, len(actions), obs.state["url"], err, file=sys.stderr)
        out.append({"id": tid, "domain": "web", "env": {"backend": "browser", "project": project, "description": desc},
                    "steps": [{"action": {"type": "browser", "action": a}} for a in actions]})
finally:
    sb.close()
with open(sys.argv[1], "w") as f:
    for t in out:
        f.write(json.dumps(t, ensure_ascii=False) + "\n")
