"""SWE sandboxes: a Python repository at a pinned commit in a Docker container, and its tools.

The ``swe`` image (``suites/swe/image``) holds each project of its
``sdists.toml`` as a git repository at ``/repos/<project>``, committed at a
pinned hash and tagged ``fidelity-pin``. A trajectory names its project in
``env.project``; the shell starts in the repository, ``env.setup`` runs there
(e.g. planting the bug to fix) and whatever it changed is committed as the
baseline, so diffs show only the agent's edits (as the SWE-bench harness does).

Tools (:class:`~fidelity.trajectory.ToolAction`, or a plain command):

- ``bash`` (``command``): a shell command, as a :class:`CommandAction`;
- ``str_replace_editor``: SWE-agent's editor (view, create, str_replace,
  insert, undo_edit), a script in the image run through the persistent shell,
  its undo history kept in the container;
- ``submit``: the final diff against the baseline (untracked files included).

A malformed call (unknown tool or command, missing argument) is an
observation with the message a harness gives, never an exception. Every
observation carries the repository state in ``Observation.state``:
``changed_files``, ``diff`` (against the baseline) and ``tests``, the
pass/fail map parsed from the step's test-runner output.

:meth:`SweSandbox.recycle` resets a used container to the clean state
without starting a new one (processes killed, ``git checkout -f`` of the
pinned commit and ``git clean -fdx``, scratch folders emptied): what the pool
does between trajectories.
"""

from __future__ import annotations

import json
from typing import Any

from fidelity.compare.swe import diff_files, pass_fail_map
from fidelity.errors import SandboxError
from fidelity.resources import data_dir
from fidelity.sandboxes.docker.archive import workdir_archive
from fidelity.sandboxes.docker.sandbox import DockerSandbox
from fidelity.sandboxes.shell import CONTROL, quote
from fidelity.trajectory import Action, CommandAction, EnvSpec, Observation, ToolAction

REPOS = "/repos"
PIN_TAG = "fidelity-pin"
TOOLS = ("bash", "str_replace_editor", "submit")
_BASELINE_ENV = (
    "GIT_AUTHOR_DATE=2024-01-01T00:00:00+00:00 GIT_COMMITTER_DATE=2024-01-01T00:00:00+00:00"
)
_STATE_TIMEOUT = 30.0
_EDITOR = "str_replace_editor.py"


def repo_path(project: str) -> str:
    """Where *project*'s repository lives in the container."""
    return f"{REPOS}/{project}"


class SweSandbox(DockerSandbox):
    """A Docker sandbox on one repository of the swe image (see module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._baseline = PIN_TAG

    # -- lifecycle ---------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Start a fresh container on ``env.project``, run the setup, commit the baseline."""
        project = _project(env)
        super().reset(env)
        return self._enter(project or env.image or "")

    def recycle(self, env: EnvSpec) -> Observation | None:
        """Reset this running container to a clean *env* (the pool's fast reset).

        Returns None, with the sandbox closed, when the container died or the
        cleanup failed: the caller then starts a fresh one with :meth:`reset`.
        """
        project = _project(env)
        if env.image or self._profile is not None or project is None:  # an own image: no pin
            self.close()
            return None
        if not self.alive() or self._keepalive is None:
            self.close()
            return None
        with self._lifecycle:
            shell, self._shell = self._shell, None
        if shell is not None:
            shell.close()
        code, _ = self._exec(["/bin/bash", "--noprofile", "--norc", "-c", self._clean()])
        container = self._container
        if code != 0 or container is None or not container.put_archive("/", workdir_archive(env)):
            self.close()
            return None
        self._env = env
        self._cwd = self._start_dir(env)
        self._partial_keys = False
        self._start_shell()
        for index, command in enumerate(env.setup):
            self._run_setup(index, command)
        return self._enter(project)

    def _start_dir(self, env: EnvSpec) -> str:
        """The project's repository; in an own image (``env.image``), its WORKDIR."""
        if env.image:
            return super()._start_dir(env)
        return repo_path(_project(env) or "")

    def _requirements(self) -> list[str]:
        return [*super()._requirements(), "python3", "git"]

    def _harness_files(self) -> dict[str, bytes]:
        if self._profile is None:
            return {}
        return {_EDITOR: (data_dir("suites") / "swe" / "image" / _EDITOR).read_bytes()}

    def _clean(self) -> str:
        """Shell script: kill every process but init and the keepalive, restore every repo."""
        spared = f" 1 {self._keepalive} $$ "
        return (
            f'for d in /proc/[0-9]*; do p=${{d#/proc/}}; case "{spared}" in *" $p "*) ;; '
            "*) kill -KILL $p 2>/dev/null;; esac; done; "
            "shopt -s dotglob nullglob; "
            "rm -rf /tmp/* /var/tmp/* /dev/shm/* /workspace/* /home/agent/* || exit 1; "
            f"for r in {REPOS}/*; do "
            '  if [ -d "$r/.git" ]; then '
            f'    git -C "$r" checkout -q -f -B main {PIN_TAG} && git -C "$r" clean -fdxq || exit 1; '
            '  else rm -rf "$r" || exit 1; fi; '
            "done"
        )

    def _enter(self, project: str) -> Observation:
        """Check the repository, commit what the setup changed as the baseline."""
        repo = self._start_dir(self._env) if self._env else repo_path(project)
        if self._cwd != repo:
            raise SandboxError(f"env.project {project!r}: no repository {repo} in the image")
        commit = self._internal(
            f"git add -A && {{ git diff --cached --quiet || "
            f"{_BASELINE_ENV} git commit -q -m 'fidelity: setup'; }} && git rev-parse HEAD && "
            # An index older than every file makes git compare contents, not stats, so the
            # agent's own git status/diff see edits that kept a file's size and mtime. Not
            # @0: git reads an index timestamp of 0 as "unknown" and then trusts every stat.
            "touch -d @1 .git/index"
        )
        if commit.exit_code != 0:
            raise SandboxError(f"committing the setup of {project} failed: {commit.text[-300:]}")
        self._baseline = commit.text.strip()
        return Observation(text="", exit_code=0, cwd=self._cwd, state=self._state(""))

    # -- stepping ----------------------------------------------------------------

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run a command or a tool call; the observation carries the repository state."""
        if self._shell is None or self._container is None:
            raise SandboxError("step() before reset(): the sandbox is not running")
        if isinstance(action, ToolAction):
            observation = self._tool(action, timeout or self.config.step_timeout)
        else:
            observation = super().step(action, timeout)
        if observation.error is not None and observation.exit_code is None:
            return observation  # an infrastructure failure: no state to read
        return observation.model_copy(update={"state": self._state(observation.text)})

    def _tool(self, action: ToolAction, timeout: float) -> Observation:
        args = action.args
        if action.tool == "bash":
            command = args.get("command")
            if not isinstance(command, str) or not command.strip():
                return _tool_error("Parameter `command` is required for tool: bash")
            return super().step(CommandAction(command=command), timeout)
        if action.tool == "str_replace_editor":
            editor = "str_replace_editor"
            if self._profile is not None:  # an own image: the copy the harness put in
                editor = f"python3 {CONTROL}/{_EDITOR}"
            ran = self._run_command(f"{editor} {quote(json.dumps(args))}", timeout, internal=True)
            return ran.model_copy(update={"exit_code": None})
        if action.tool == "submit":
            return Observation(text=self._diff(), cwd=self._cwd)
        return _tool_error(
            f"Unknown tool {action.tool!r}. The available tools are: {', '.join(TOOLS)}"
        )

    # -- repository state ------------------------------------------------------

    def _internal(self, command: str) -> Observation:
        """Run harness plumbing in the shell at the repository, cwd left as the agent left it."""
        cwd = self._cwd
        repo = self._start_dir(self._env) if self._env else cwd
        observation = self._run_command(
            f"(cd {quote(repo)} && {command})", _STATE_TIMEOUT, internal=True
        )
        self._cwd = cwd
        return observation

    def _diff(self) -> str:
        """``git diff`` of the work tree (untracked files included) against the baseline.

        A fresh temporary index keeps the agent's own index untouched, and has
        no cached file stats: every file is hashed, so an edit that kept a
        file's size and timestamp (fast edits, coarse clocks) is still seen.
        """
        diffed = self._internal(
            'i=$(mktemp -u) && { GIT_INDEX_FILE="$i" git add -A && '
            f'GIT_INDEX_FILE="$i" git diff --cached --no-color --no-renames {self._baseline}; '
            'r=$?; rm -f "$i"; exit $r; }'
        )
        if diffed.exit_code != 0:
            raise SandboxError(f"reading the repository diff failed: {diffed.text[-300:]}")
        return diffed.text

    def _state(self, text: str) -> dict[str, Any]:
        diff = self._diff()
        return {
            "changed_files": sorted(diff_files(diff)),
            "diff": diff,
            "tests": pass_fail_map(text),
        }


def _project(env: EnvSpec) -> str | None:
    """``env.project``; None for an own image (``env.image``: its WORKDIR is the repository)."""
    if env.image:
        return None
    if not env.project:
        raise SandboxError(
            "an swe environment names its repository in env.project (or its image in env.image)"
        )
    return env.project


def _tool_error(message: str) -> Observation:
    return Observation(text=message + "\n")
