#!/usr/bin/python3
"""The SWE file editor, with SWE-agent's ``str_replace_editor`` semantics and messages.

Called by the fidelity SWE sandbox through the container's shell with one
argument, the tool call's arguments as JSON: ``command`` (view, create,
str_replace, insert, undo_edit), ``path`` (absolute) and the command's own
parameters. The message goes to stdout; the exit status is 0 on success and
1 on an error (the message says what was wrong). Undo history lives in
/tmp/.str_replace_editor (one list of earlier contents per file).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_LINES = 4
HISTORY = Path("/tmp/.str_replace_editor")
REQUIRED = {
    "create": ("file_text",),
    "str_replace": ("old_str",),
    "insert": ("insert_line", "new_str"),
}


class ToolError(Exception):
    """A mistake in the call: reported to the agent, never a crash."""


def numbered(text: str, name: str, first: int = 1) -> str:
    """``cat -n`` style listing of *text* (tabs expanded), as the agent sees it."""
    lines = text.expandtabs().split("\n")
    body = "\n".join(f"{index:6}\t{line}" for index, line in enumerate(lines, start=first))
    return f"Here's the result of running `cat -n` on {name}:\n{body}\n"


def history_file(path: Path) -> Path:
    return HISTORY / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + ".json")


def push_history(path: Path, text: str) -> None:
    HISTORY.mkdir(parents=True, exist_ok=True)
    store = history_file(path)
    past = json.loads(store.read_text()) if store.exists() else []
    store.write_text(json.dumps([*past, text]))


def check_path(command: str, path: Path) -> None:
    if not path.is_absolute():
        suggestion = Path("/") / path
        raise ToolError(
            f"The path {path} is not an absolute path, it should start with `/`. "
            f"Maybe you meant {suggestion}?"
        )
    if command == "create":
        if path.exists():
            raise ToolError(
                f"File already exists at: {path}. Cannot overwrite files using command `create`."
            )
        return
    if not path.exists():
        raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
    if path.is_dir() and command != "view":
        raise ToolError(
            f"The path {path} is a directory and only the `view` command can be used on directories"
        )


def view(path: Path, view_range: object) -> str:
    if path.is_dir():
        if view_range is not None:
            raise ToolError(
                "The `view_range` parameter is not allowed when `path` points to a directory."
            )
        found = subprocess.run(
            ["find", str(path), "-maxdepth", "2", "-not", "-path", "*/.*"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.splitlines()
        listing = "\n".join(sorted(found))
        return (
            f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden "
            f"items:\n{listing}\n"
        )
    text = path.read_text()
    if view_range is None:
        return numbered(text, str(path))
    if (
        not isinstance(view_range, list)
        or len(view_range) != 2
        or not all(isinstance(i, int) for i in view_range)
    ):
        raise ToolError("Invalid `view_range`. It should be a list of two integers.")
    lines = text.split("\n")
    first, last = view_range
    if first < 1 or first > len(lines):
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its first element `{first}` should be within "
            f"the range of lines of the file: {[1, len(lines)]}"
        )
    if last > len(lines):
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its second element `{last}` should be smaller "
            f"than the number of lines in the file: `{len(lines)}`"
        )
    if last != -1 and last < first:
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its second element `{last}` should be larger "
            f"or equal than its first `{first}`"
        )
    shown = lines[first - 1 :] if last == -1 else lines[first - 1 : last]
    return numbered("\n".join(shown), str(path), first)


def snippet(text: str, line: int, extra: int, path: Path) -> str:
    """The edited region with SNIPPET_LINES of context either side."""
    start = max(0, line - SNIPPET_LINES)
    end = line + SNIPPET_LINES + extra
    shown = "\n".join(text.split("\n")[start : end + 1])
    return numbered(shown, f"a snippet of {path}", start + 1)


def str_replace(path: Path, old: str, new: str) -> str:
    text = path.read_text().expandtabs()
    old, new = old.expandtabs(), new.expandtabs()
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        )
    if count > 1:
        lines = [i for i, line in enumerate(text.split("\n"), start=1) if old in line]
        if not lines:  # a multi-line old_str: report where each occurrence starts
            starts, at = [], text.find(old)
            while at >= 0:
                starts.append(text.count("\n", 0, at) + 1)
                at = text.find(old, at + 1)
            lines = starts
        raise ToolError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines "
            f"{lines}. Please ensure it is unique"
        )
    push_history(path, path.read_text())
    edited = text.replace(old, new)
    path.write_text(edited)
    line = text.split(old)[0].count("\n")
    return (
        f"The file {path} has been edited. "
        + snippet(edited, line, new.count("\n"), path)
        + "Review the changes and make sure they are as expected. Edit the file again if "
        "necessary."
    )


def insert(path: Path, at: object, new: str) -> str:
    text = path.read_text().expandtabs()
    lines = text.split("\n")
    if not isinstance(at, int) or isinstance(at, bool) or at < 0 or at > len(lines):
        raise ToolError(
            f"Invalid `insert_line` parameter: {at}. It should be within the range of lines of "
            f"the file: {[0, len(lines)]}"
        )
    added = new.expandtabs().split("\n")
    push_history(path, path.read_text())
    path.write_text("\n".join(lines[:at] + added + lines[at:]))
    start = max(0, at - SNIPPET_LINES)
    shown = lines[start:at] + added + lines[at : at + SNIPPET_LINES]
    return (
        f"The file {path} has been edited. "
        + numbered("\n".join(shown), "a snippet of the edited file", start + 1)
        + "Review the changes and make sure they are as expected (correct indentation, no "
        "duplicate lines, etc). Edit the file again if necessary."
    )


def undo_edit(path: Path) -> str:
    store = history_file(path)
    past = json.loads(store.read_text()) if store.exists() else []
    if not past:
        raise ToolError(f"No edit history found for {path}.")
    path.write_text(past.pop())
    store.write_text(json.dumps(past))
    return f"Last edit to {path} undone successfully. " + numbered(path.read_text(), str(path))


def create(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    push_history(path, "")
    return f"File created successfully at: {path}"


def run(args: dict) -> str:
    command = args.get("command")
    if command not in COMMANDS:
        raise ToolError(
            f"Unrecognized command {command}. The allowed commands for the str_replace_editor "
            f"tool are: {', '.join(COMMANDS)}"
        )
    if not isinstance(args.get("path"), str):
        raise ToolError(f"Parameter `path` is required for command: {command}")
    for name in REQUIRED.get(command, ()):
        if args.get(name) is None:
            raise ToolError(f"Parameter `{name}` is required for command: {command}")
    for name in ("file_text", "old_str", "new_str"):
        if args.get(name) is not None and not isinstance(args[name], str):
            raise ToolError(f"Parameter `{name}` must be a string")
    path = Path(args["path"])
    check_path(command, path)
    if command == "view":
        return view(path, args.get("view_range"))
    if command == "create":
        return create(path, args["file_text"])
    if command == "str_replace":
        return str_replace(path, args["old_str"], args.get("new_str") or "")
    if command == "insert":
        return insert(path, args["insert_line"], args["new_str"])
    return undo_edit(path)


def main() -> int:
    try:
        args = json.loads(sys.argv[1]) if len(sys.argv) == 2 else None
    except json.JSONDecodeError as exc:
        print(f"The tool arguments are not valid JSON: {exc}")
        return 1
    if not isinstance(args, dict):
        print("usage: str_replace_editor '<JSON object of arguments>'")
        return 1
    try:
        print(run(args))
    except ToolError as exc:
        print(exc)
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
