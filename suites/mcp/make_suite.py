"""Writes suite.jsonl: the mcp domain's bundled trajectories (run from this folder)."""

import json


def call(tool, **args):
    return {"type": "tool", "tool": tool, "args": args}


def env(*servers, **overrides):
    specs = {name: {"bundled": name} for name in servers}
    specs.update(overrides)
    return {"backend": "mcp", "mcp_servers": specs}


FS = env("filesystem")
GIT_FS = env("git", filesystem={"bundled": "filesystem", "args": ["{repo}"], "cwd": "{repo}"})
SQL = env("sqlite")
MEM = env("memory")
TIME = env("time")
EVERY = env("everything")

TRAJECTORIES = {
    # filesystem: exploration, write-then-read, edits, errors
    "fs-explore": (FS, [call("list_allowed_directories"), call("list_directory", path="."), call("directory_tree", path="."), call("read_text_file", path="README.md")]),
    "fs-read-many": (FS, [call("list_directory", path="notes"), call("read_multiple_files", paths=["notes/todo.txt", "notes/release.md"]), call("read_text_file", path="notes/release.md", head=2)]),
    "fs-write-then-read": (FS, [call("write_file", path="notes/ideas.md", content="# Ideas\n\n- CSV export\n"), call("read_text_file", path="notes/ideas.md"), call("list_directory", path="notes")]),
    "fs-edit": (FS, [call("read_text_file", path="src/inventory.py"), call("edit_file", path="src/inventory.py", edits=[{"oldText": "THRESHOLD = 5", "newText": "THRESHOLD = 10"}]), call("read_text_file", path="src/inventory.py", head=6)]),
    "fs-edit-dry-run": (FS, [call("edit_file", path="notes/todo.txt", edits=[{"oldText": "- add a --csv flag", "newText": "- add --csv and --json flags"}], dryRun=True), call("read_text_file", path="notes/todo.txt"), call("get_file_info", path="notes/todo.txt")]),
    "fs-edit-miss": (FS, [call("edit_file", path="README.md", edits=[{"oldText": "no such text", "newText": "x"}]), call("read_text_file", path="README.md"), call("edit_file", path="README.md", edits=[{"oldText": "small", "newText": "tiny"}])]),
    "fs-mkdir-move": (FS, [call("create_directory", path="archive/2026"), call("move_file", source="notes/release.md", destination="archive/2026/release.md"), call("list_directory", path="notes"), call("directory_tree", path="archive")]),
    "fs-search": (FS, [call("search_files", path=".", pattern="*.py"), call("search_files", path=".", pattern="**/*.md"), call("search_files", path=".", pattern="*.csv")]),
    "fs-info": (FS, [call("get_file_info", path="data/stock.json"), call("list_directory_with_sizes", path="data"), call("list_directory_with_sizes", path=".", sortBy="size")]),
    "fs-errors": (FS, [call("read_text_file", path="missing.txt"), call("read_text_file", path="/etc/passwd"), call("list_directory", path="../.."), call("read_text_file", path="data/stock.json")]),
    "fs-unknown-tool": (FS, [call("delete_file", path="README.md"), call("tools/list"), call("read_text_file", path="README.md")]),
    "fs-bad-arguments": (FS, [call("write_file", path="x.txt"), call("read_text_file"), call("list_directory", path=".")]),
    "fs-json-data": (FS, [call("read_text_file", path="data/stock.json"), call("write_file", path="data/stock.json", content='{"warehouse": "WH-1", "items": {"bolts": 120, "gaskets": 40}}\n'), call("read_text_file", path="data/stock.json"), call("get_file_info", path="data/stock.json")]),
    "fs-long-session": (FS, [call("list_directory", path="."), call("read_text_file", path="notes/todo.txt"), call("create_directory", path="docs"), call("write_file", path="docs/usage.md", content="Run `python src/inventory.py`.\n"), call("edit_file", path="docs/usage.md", edits=[{"oldText": "Run", "newText": "Run, from the project root,"}]), call("read_text_file", path="docs/usage.md"), call("move_file", source="docs/usage.md", destination="USAGE.md"), call("list_directory", path="."), call("search_files", path=".", pattern="*.md"), call("directory_tree", path=".")]),
    # git (with a filesystem server on the same repository for edits)
    "git-status-log": (GIT_FS, [call("git_status", repo_path="."), call("git_log", repo_path=".", max_count=5), call("git_branch", repo_path=".", branch_type="local")]),
    "git-edit-diff-commit": (GIT_FS, [call("write_file", path="notes/todo.txt", content="- add a --csv flag\n"), call("git_status", repo_path="."), call("git_diff_unstaged", repo_path="."), call("git_add", repo_path=".", files=["notes/todo.txt"]), call("git_diff_staged", repo_path="."), call("git_commit", repo_path=".", message="Trim the todo list"), call("git_log", repo_path=".", max_count=2)]),
    "git-branch-checkout": (GIT_FS, [call("git_create_branch", repo_path=".", branch_name="feature/csv"), call("git_checkout", repo_path=".", branch_name="feature/csv"), call("git_branch", repo_path=".", branch_type="local"), call("git_status", repo_path=".")]),
    "git-show": (GIT_FS, [call("git_log", repo_path=".", max_count=1), call("git_show", repo_path=".", revision="HEAD"), call("git_show", repo_path=".", revision="no-such-rev")]),
    "git-reset": (GIT_FS, [call("write_file", path="README.md", content="changed\n"), call("git_add", repo_path=".", files=["README.md"]), call("git_reset", repo_path="."), call("git_status", repo_path=".")]),
    "git-outside-repo": (GIT_FS, [call("git_status", repo_path="/"), call("git_log", repo_path="/tmp", max_count=1), call("git_status", repo_path=".")]),
    # sqlite
    "sql-explore": (SQL, [call("list_tables"), call("describe_table", table_name="products"), call("read_query", query="SELECT * FROM products ORDER BY id")]),
    "sql-write-then-read": (SQL, [call("write_query", query="UPDATE products SET stock = stock + 50 WHERE name = 'gaskets'"), call("read_query", query="SELECT name, stock FROM products WHERE name = 'gaskets'"), call("read_query", query="SELECT COUNT(*) AS low FROM products WHERE stock < 5")]),
    "sql-create-insert": (SQL, [call("create_table", query="CREATE TABLE suppliers (id INTEGER PRIMARY KEY, name TEXT)"), call("write_query", query="INSERT INTO suppliers (name) VALUES ('Acme'), ('Globex')"), call("read_query", query="SELECT * FROM suppliers"), call("list_tables")]),
    "sql-join": (SQL, [call("describe_table", table_name="orders"), call("read_query", query="SELECT p.name, o.quantity, o.status FROM orders o JOIN products p ON p.id = o.product_id ORDER BY o.id"), call("read_query", query="SELECT status, SUM(quantity) AS total FROM orders GROUP BY status ORDER BY status")]),
    "sql-errors": (SQL, [call("read_query", query="DELETE FROM orders"), call("read_query", query="SELECT * FROM nowhere"), call("write_query", query="SELECT 1"), call("describe_table", table_name="nowhere")]),
    "sql-insight": (SQL, [call("read_query", query="SELECT name FROM products WHERE stock < 5 ORDER BY name"), call("append_insight", insight="gaskets and washers need reordering"), call("list_tables")]),
    # memory (knowledge graph)
    "memory-build-graph": (MEM, [call("read_graph"), call("create_entities", entities=[{"name": "WH-1", "entityType": "warehouse", "observations": ["main warehouse"]}, {"name": "gaskets", "entityType": "item", "observations": ["stock 3"]}]), call("create_relations", relations=[{"from": "gaskets", "to": "WH-1", "relationType": "stored_in"}]), call("read_graph")]),
    "memory-observations": (MEM, [call("create_entities", entities=[{"name": "alice", "entityType": "person", "observations": ["buyer"]}]), call("add_observations", observations=[{"entityName": "alice", "contents": ["orders gaskets monthly"]}]), call("open_nodes", names=["alice"]), call("delete_observations", deletions=[{"entityName": "alice", "observations": ["buyer"]}]), call("search_nodes", query="gaskets")]),
    "memory-delete": (MEM, [call("create_entities", entities=[{"name": "old", "entityType": "note", "observations": ["x"]}, {"name": "new", "entityType": "note", "observations": ["y"]}]), call("delete_entities", entityNames=["old"]), call("read_graph"), call("add_observations", observations=[{"entityName": "old", "contents": ["z"]}])]),
    # time
    "time-convert": (TIME, [call("convert_time", source_timezone="Europe/Paris", time="09:30", target_timezone="America/New_York"), call("convert_time", source_timezone="Asia/Kolkata", time="18:00", target_timezone="UTC"), call("convert_time", source_timezone="UTC", time="25:00", target_timezone="UTC")]),
    "time-now-and-errors": (TIME, [call("get_current_time", timezone="UTC"), call("get_current_time", timezone="Mars/Olympus"), call("convert_time", source_timezone="UTC", time="12:00", target_timezone="Australia/Sydney")]),
    # everything (the reference test server)
    "everything-basics": (EVERY, [call("echo", message="hello"), call("get-sum", a=2, b=40), call("get-sum", a="two", b=1)]),
    "everything-structured": (EVERY, [call("get-structured-content", location="New York"), call("get-annotated-message", messageType="error", includeImage=False), call("tools/list")]),
    # several servers in one trajectory
    "multi-fs-sqlite": (env("filesystem", "sqlite"), [call("read_text_file", path="data/stock.json"), call("read_query", query="SELECT name, stock FROM products ORDER BY name"), call("write_file", path="data/report.txt", content="low: gaskets, washers\n"), call("read_text_file", path="data/report.txt")]),
}


def main():
    with open("suite.jsonl", "w") as out:
        for name, (spec, steps) in TRAJECTORIES.items():
            assert 3 <= len(steps) <= 12, name
            record = {"id": f"mcp-{name}", "domain": "mcp", "env": spec, "steps": [{"action": a} for a in steps]}
            out.write(json.dumps(record) + "\n")


main()
