"""Data model: actions, observations, steps, trajectories and environment specs.

These pydantic models are the interchange format (see ``formats/jsonl.py``).
Every model forbids unknown fields so a typo in a suite fails at the edge with
the field's name instead of being silently ignored.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

FORMAT_VERSION: Final = 1


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(
            "contains a NUL character (\\u0000), which a command line, path or "
            "environment variable cannot carry"
        )
    return value


OsText = Annotated[str, AfterValidator(_no_nul)]
"""Text handed to the operating system (a command, a path, an environment variable):
a NUL would cut it short there, so it is refused. Observations and other text
may hold NULs (a program's real output can)."""

IMAGE_REFERENCE: Final = r"^[a-z0-9][A-Za-z0-9._/:-]*(@sha256:[0-9a-f]{64})?$"
"""A container image reference: ``name``, ``name:tag``, ``registry/name:tag`` or ``name@digest``."""

Command = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]
"""A command line: not empty, no NUL."""


class Domain(StrEnum):
    """The seven domains of Qwen-AgentWorld."""

    terminal = "terminal"
    swe = "swe"
    web = "web"
    android = "android"
    mcp = "mcp"
    search = "search"
    os = "os"


class Side(StrEnum):
    """Where an observation came from."""

    real = "real"
    sim = "sim"


class Strict(BaseModel):
    """Base for every interchange model: unknown fields are errors.

    Validators are built on first use (``defer_build``): a command that validates no
    trajectory (``fidelity runs``) does not pay for building all of them at import.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class CommandAction(Strict):
    """Run one shell command to completion; exit code and cwd come back structured."""

    type: Literal["command"] = "command"
    command: Command
    timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds; shortens the run's step timeout, never lengthens it",
    )

    @property
    def name(self) -> str:
        """The program the command runs (``git``, ``ls``…), for per-action-type tables."""
        return command_name(self.command)

    def render(self) -> str:
        """The action as the agent would type it."""
        return self.command


class KeystrokesAction(Strict):
    """Send raw input to the terminal, then wait ``duration`` seconds for output."""

    type: Literal["keystrokes"] = "keystrokes"
    keys: str
    duration: float = Field(default=1.0, ge=0, le=600)

    @property
    def name(self) -> str:
        """``keys:<program>`` when the keys type a command line, else ``keys``."""
        typed = command_name(self.keys)
        return f"keys:{typed}" if typed != "?" else "keys"

    def render(self) -> str:
        """The keys as typed."""
        return self.keys


class TextAction(Strict):
    """An action given only as text (a benchmark turn's prompt, a GUI or tool call as written).

    For domains without a structured action type yet: it can be simulated and
    compared, not replayed in a sandbox.
    """

    type: Literal["text"] = "text"
    text: str = Field(min_length=1)

    @property
    def name(self) -> str:
        """Always ``text``: the content has no program to group by."""
        return "text"

    def render(self) -> str:
        """The text as given."""
        return self.text


class ToolAction(Strict):
    """A named tool call with JSON arguments (SWE's ``str_replace_editor`` and ``submit``, MCP tools).

    The backend that runs the domain knows the tool; an unknown tool or bad
    arguments give an observation with an error message, as a real agent
    harness would answer, never a crash.
    """

    type: Literal["tool"] = "tool"
    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        """The tool, with its ``command`` argument when it has one (``str_replace_editor view``)."""
        command = self.args.get("command")
        return f"{self.tool} {command}" if isinstance(command, str) else self.tool

    def render(self) -> str:
        """The call as one line: ``str_replace_editor(command='view', path='/repo/a.py')``."""
        args = ", ".join(f"{key}={value!r}" for key, value in self.args.items())
        return f"{self.tool}({args})"


class BrowserAction(Strict):
    """One high-level browser action as BrowserGym writes it: ``click('12')``, ``goto('http://…')``.

    The text is parsed by the browser backend's parser (never evaluated); a
    malformed action is an observation carrying the error.
    """

    type: Literal["browser"] = "browser"
    action: str = Field(min_length=1, max_length=10_000)

    @property
    def name(self) -> str:
        """The function called (``click``, ``fill``…), for per-action-type tables."""
        head = self.action.strip().split("(", 1)[0].strip()
        return head if head.isidentifier() else "?"

    def render(self) -> str:
        """The action as written."""
        return self.action


class CodeAction(Strict):
    """A desktop action as OSWorld writes it: pyautogui code, or ``WAIT``, ``DONE``, ``FAIL``.

    The os domain's backend runs the code in a sandboxed process against its own
    display only; a malformed or failing snippet is an observation carrying the error.
    """

    type: Literal["code"] = "code"
    code: str = Field(min_length=1, max_length=100_000)

    @property
    def name(self) -> str:
        """``WAIT``/``DONE``/``FAIL``, else the first function called (``pyautogui.click``)."""
        head = self.code.strip()
        if head in ("WAIT", "DONE", "FAIL"):
            return head
        match = re.search(r"([A-Za-z_][\w.]*)\s*\(", head)
        return match.group(1) if match else "code"

    def render(self) -> str:
        """The code as written."""
        return self.code


AndroidActionType = Literal[
    "click",
    "double_tap",
    "long_press",
    "scroll",
    "swipe",
    "input_text",
    "keyboard_enter",
    "navigate_home",
    "navigate_back",
    "open_app",
    "status",
    "wait",
    "answer",
    "unknown",
]


class AndroidAction(Strict):
    """One AndroidWorld ``JSONAction``: ``action_type`` plus the fields it needs.

    ``index`` names a UI element of the last observation; ``x``/``y`` are screen
    pixels; ``direction`` is ``up``/``down``/``left``/``right`` for scroll and swipe.
    """

    type: Literal["android"] = "android"
    action_type: AndroidActionType
    index: int | None = Field(default=None, ge=0)
    x: int | None = Field(default=None, ge=0)
    y: int | None = Field(default=None, ge=0)
    text: str | None = None
    direction: Literal["up", "down", "left", "right"] | None = None
    app_name: str | None = None
    goal_status: str | None = None
    keycode: str | None = None
    clear_text: bool | None = None

    @property
    def name(self) -> str:
        """The action type (``click``, ``input_text``…), for per-action-type tables."""
        return self.action_type

    def render(self) -> str:
        """The action as AndroidWorld's JSON, unset fields left out."""
        return json.dumps(self.model_dump(exclude_none=True, exclude={"type"}), ensure_ascii=False)


Action = Annotated[
    CommandAction
    | KeystrokesAction
    | TextAction
    | ToolAction
    | BrowserAction
    | CodeAction
    | AndroidAction,
    Field(discriminator="type"),
]


class Observation(Strict):
    """What followed an action.

    ``text`` is what the agent sees; everything else is a structured side
    channel. ``error`` is set only for infrastructure failures (the sandbox
    died, the world model failed): those are kept apart from real mismatches.
    """

    text: str = ""
    exit_code: int | None = None
    cwd: str | None = None
    timed_out: bool = False
    truncated: bool = False
    error: str | None = Field(default=None, description="infrastructure failure class and message")
    state: dict[str, Any] | None = Field(
        default=None,
        description="structured environment state beside the text (swe: changed files, diff, "
        "test outcomes; web: url, title, tabs, focused element, last action error)",
    )

    @property
    def failed(self) -> bool:
        """True when no observation could be produced (infrastructure failure)."""
        return self.error is not None


class Step(Strict):
    """One action and, when known, the observation that followed it."""

    action: Action
    observation: Observation | None = None
    control: Control | None = Field(
        default=None, description="an instruction to the world model for this step"
    )


class Control(Strict):
    """A control instruction for one simulated step (inject an error, a timeout…).

    ``instruction`` is shown to the world model with the action. ``expect`` (a
    regular expression searched in the simulated text) and ``exit_code`` say
    how to check that the simulation obeyed; with neither, obedience is not
    judged.
    """

    instruction: str = Field(min_length=1)
    expect: str | None = None
    exit_code: int | None = None

    @field_validator("expect")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from None
        return value

    def obeyed(self, observation: Observation) -> bool | None:
        """Whether *observation* follows this control; None when nothing is checked or it failed."""
        if (self.expect is None and self.exit_code is None) or observation.failed:
            return None
        if self.expect is not None and re.search(self.expect, observation.text) is None:
            return False
        return self.exit_code is None or observation.exit_code == self.exit_code


McpBundled = Literal["filesystem", "memory", "everything", "git", "time", "sqlite"]


class McpServer(Strict):
    """One MCP server of an environment, as an MCP client configuration names it.

    Either a ``bundled`` server (installed by ``fidelity sandbox build --domain
    mcp``) or the user's own ``command`` with ``args`` and ``env``. In ``args``
    and ``env`` values, ``{root}``, ``{repo}``, ``{db}``, ``{memory}`` and
    ``{state}`` name the trajectory's fresh state (a files root, a seeded git
    repository, a seeded SQLite database, a memory file, their folder).
    """

    bundled: McpBundled | None = None
    command: Command | None = None
    args: list[OsText] = Field(default_factory=list)
    env: dict[OsText, OsText] = Field(default_factory=dict)
    cwd: OsText | None = Field(default=None, description="working folder (relative paths in calls)")

    @model_validator(mode="after")
    def _one_source(self) -> McpServer:
        if (self.bundled is None) == (self.command is None):
            raise ValueError("give exactly one of 'bundled' and 'command'")
        return self


SITE_NAME: Final = r"^[a-z][a-z0-9_]{0,63}$"
"""A web site's name in ``env.sites``: ``shopping``, ``shopping_admin``, ``gitlab``..."""


def _site_base(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) base URL such as http://host:7770")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("a base URL is scheme, host, port and path: no query, fragment or user")
    _ = parts.port  # raises ValueError for a port out of range
    return value.rstrip("/")


SiteUrl = Annotated[str, Field(max_length=2000), AfterValidator(_site_base)]
"""An http(s) origin with an optional path, without a trailing slash."""


class WebSite(Strict):
    """One of the user's web sites (a WebArena site): where it runs and how it is reset.

    ``url`` is the live base URL the browser uses (None: the run's default, from
    ``--site NAME=URL`` or BrowserGym's ``WA_<NAME>`` variable). ``recorded`` is the base
    URL the trajectory's actions and observations were recorded on (default: ``url``):
    actions are mapped from it to ``url``, observations back. ``reset`` runs on the
    auditing machine before each trajectory (WebArena restarts the site's containers).
    A plain string stands for ``{"url": ...}``.
    """

    url: SiteUrl | None = None
    recorded: SiteUrl | None = None
    reset: Command | None = Field(default=None, description="run by /bin/sh before each trajectory")

    @model_validator(mode="before")
    @classmethod
    def _url_only(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else {} if data is None else data


class OutcomeCheck(Strict):
    """The environment's own test of a trajectory's outcome: a command run in the sandbox
    after the last step. Exit 0 is success, an exit code in ``failure_codes`` failure;
    anything else (killed, timed out, a crash by signal, a command that cannot run, an
    unexpected code) leaves the outcome unverifiable, with the reason."""

    command: Command
    timeout: float = Field(default=60.0, gt=0, le=3600, description="seconds")
    failure_codes: list[Annotated[int, Field(ge=1, le=125)]] = Field(
        default_factory=lambda: [1],
        description="exit codes that mean the task failed (1: pytest's, unittest's)",
    )


class Outcome(Strict):
    """How a trajectory ended, as claimed by its simulation or the dataset it came from."""

    success: bool | None = None
    reward: float | None = None
    claimed_by: Literal["simulation", "dataset"] | None = Field(
        default=None, description="simulation: the agent inside the world model; dataset: a label"
    )
    answer: str | None = Field(
        default=None,
        description="the answer the dataset gives for the task, as text (an RL record's string "
        "ground truth): kept and exported as it is, never graded here; whether the run "
        "succeeded stays unknown until the environment's check (env.check) decides",
    )

    @model_serializer(mode="wrap")
    def _without_unset_answer(self, handler: SerializerFunctionWrapHandler) -> Any:
        """An unset ``answer`` is left out (outcomes dump and hash as before it existed)."""
        data = handler(self)
        if isinstance(data, dict) and "answer" in data and data["answer"] is None:
            del data["answer"]
        return data


class SweInstance(Strict):
    """A SWE-bench-family instance record, in the dataset's own field names.

    The eight fields the harness needs are required; ``FAIL_TO_PASS`` and
    ``PASS_TO_PASS`` are lists, or the JSON-encoded strings the HF dataset stores.
    ``image``, ``log_parser``, ``eval_type`` and ``eval_script`` are the columns
    swebench 5.x records add (its ``make_test_spec`` reads them): grading needs them.
    A SWE-smith record names its image in ``image_name`` and has no ``version``,
    ``base_commit``, ``environment_setup_commit`` or ``test_patch`` (the SWE-bench/SWE-smith
    dataset cards list ``instance_id, patch, FAIL_TO_PASS, PASS_TO_PASS, image_name, repo,
    problem_statement``): in a record with ``image_name`` those four are null when absent.
    Other columns are ignored, not refused: the published datasets add optional metadata
    (Verified's ``difficulty``, columns one split has and another lacks).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    instance_id: str = Field(min_length=1, max_length=300)
    repo: str = Field(min_length=1)
    version: str | None
    base_commit: Annotated[str, Field(min_length=1)] | None
    environment_setup_commit: str | None
    test_patch: str | None
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    patch: str | None = None
    problem_statement: str | None = None
    hints_text: str | None = None
    created_at: str | None = None
    split: str | None = None
    image: str | None = Field(default=None, description="swebench 5.x: the image it names")
    image_name: str | None = Field(default=None, description="SWE-smith: the image it names")
    log_parser: str | None = Field(default=None, description="swebench 5.x: PARSER_REGISTRY key")
    eval_type: str | None = Field(default=None, description="swebench 5.x: pass_and_fail, ...")
    eval_script: str | None = Field(default=None, description="swebench 5.x: the eval.sh")
    image_assets: Any = None

    @model_validator(mode="before")
    @classmethod
    def _swe_smith_shape(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("image_name") is not None:
            absent = ("version", "base_commit", "environment_setup_commit", "test_patch")
            return {**dict.fromkeys(absent), **data}
        return data

    @field_validator("image_name")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        # a clear message, not the pattern: this name goes to `docker run` as it is
        if value is not None and (len(value) > 255 or not re.fullmatch(IMAGE_REFERENCE, value)):
            raise PydanticCustomError(
                "image_reference",
                "not a container image reference (name, name:tag, registry/name:tag or "
                "name@sha256:digest)",
            )
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list ({exc.msg})") from None
        return value


class InstanceSpec(Strict):
    """A trajectory's SWE-bench-family instance: its id, with the record inline or looked up
    in the instances file the run is given (``--instances``)."""

    instance_id: str = Field(min_length=1, max_length=300)
    record: SweInstance | None = None
    timeout: float = Field(default=1800.0, gt=0, le=86400, description="eval script, seconds")

    @model_validator(mode="before")
    @classmethod
    def _bare_id(cls, data: Any) -> Any:
        return {"instance_id": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _same_id(self) -> InstanceSpec:
        if self.record is not None and self.record.instance_id != self.instance_id:
            raise ValueError(
                f"record.instance_id {self.record.instance_id!r} is not {self.instance_id!r}"
            )
        return self


class EnvSpec(Strict):
    """What a sandbox needs to start.

    ``workdir`` is copied fresh for every trajectory; a relative path is
    resolved against the suite file's folder, then the bundled data folders.
    ``setup`` runs inside the sandbox before the first step (not recorded).
    """

    backend: Literal["local", "docker", "browser", "mcp", "search", "desktop", "adb"] = "local"
    project: OsText | None = Field(
        default=None,
        description="a named environment the backend prepares (an SWE repository, a web site): "
        "suites/<domain>/<project>/",
    )
    sites: dict[Annotated[str, StringConstraints(pattern=SITE_NAME)], WebSite] | None = Field(
        default=None,
        description="web: the user's sites this trajectory uses, by name (a WebArena site: "
        "shopping, gitlab...); a site without a URL takes the run's (--site, WA_<NAME>)",
    )
    workdir: OsText | None = None
    task: OsText | None = Field(
        default=None,
        description="a Terminal-Bench task folder (task.yaml, Dockerfile or docker-compose.yaml, "
        "run-tests.sh, tests/): the trajectory's environment, and its tests the real outcome; "
        "relative to the suite file's folder",
    )
    image: Annotated[OsText, StringConstraints(pattern=IMAGE_REFERENCE, max_length=255)] | None = (
        Field(
            default=None,
            description="docker/swe backends: the container image of this trajectory (a name, "
            "name:tag or name@digest), used instead of the configured default",
        )
    )
    instance: InstanceSpec | None = Field(
        default=None,
        description="a SWE-bench-family instance: its image (named by the swebench package) "
        "and, after the last step, its grading by swebench's eval script and log parser",
    )
    setup: list[OsText] = Field(default_factory=list)
    env: dict[OsText, OsText] = Field(default_factory=dict)
    description: str | None = Field(default=None, description="shown to the world model")
    initial_observation: str | None = Field(
        default=None,
        description="what the agent sees before its first action (the web start page), shown "
        "to the world model; a replay fills it from the real sandbox when it is not given",
    )

    tools: list[dict[str, Any]] | None = Field(
        default=None,
        description="definitions of the tools the agent can call (MCP tools/list entries, "
        "SWE or search tool schemas), shown to the world model as its tool definitions",
    )

    mcp_servers: dict[str, McpServer] | None = Field(
        default=None,
        description="the mcp backend's servers by name (an MCP client's mcpServers); "
        "tools are looked up in this order",
    )
    check: OutcomeCheck | None = Field(
        default=None,
        description="run after the last step: the real outcome (never shown to the world model)",
    )

    def digest(self) -> str:
        """Stable hash of the spec (cache keys, provenance); an unset check or image changes
        nothing."""
        unset = {
            name
            for name in ("check", "image", "instance", "sites", "task")
            if getattr(self, name) is None
        }
        return stable_hash(self.model_dump(mode="json", exclude=unset or None))


TASK_META: Final = "task_instruction"
"""The ``meta`` key older files hold the task in: read when ``instruction`` is unset."""

_TASK_FIELDS: Final = ("instruction", "system_prompt")


class Trajectory(Strict):
    """An environment spec plus an ordered list of steps (depth = 1-based index).

    ``instruction`` is what the agent was asked to do and ``system_prompt`` what it was
    told it is (its system message); both optional, and left out of the JSON when unset.
    They are not ``env.task`` (a Terminal-Bench task folder).
    """

    version: Literal[1] = FORMAT_VERSION
    id: str = Field(min_length=1, max_length=200)
    domain: Domain
    instruction: str | None = Field(
        default=None,
        min_length=1,
        description="what the agent was asked to do: the task, issue or goal (shown to the "
        "world model on turn 1, the prompt of the training exports)",
    )
    system_prompt: str | None = Field(
        default=None,
        min_length=1,
        description="what the agent was told it is: its system message (the exports' system "
        "turn; never shown to the world model, whose system prompt is its own)",
    )
    env: EnvSpec = Field(default_factory=EnvSpec)
    steps: list[Step] = Field(min_length=1)
    source: Literal["real", "sim", "suite"] = "suite"
    meta: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome | None = Field(
        default=None, description="the outcome claimed for the recorded (simulated) run"
    )

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("must be printable text")
        return value

    @model_serializer(mode="wrap")
    def _without_unset_task(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Unset ``instruction`` and ``system_prompt`` are left out, so a trajectory without
        them dumps (and hashes: suite digests, cache keys) as it did before they existed."""
        data = handler(self)
        if isinstance(data, dict):
            for name in _TASK_FIELDS:
                if name in data and data[name] is None:
                    del data[name]
        return data

    @property
    def task_instruction(self) -> str | None:
        """The task the agent was asked to do: ``instruction``, else ``meta.task_instruction``
        (files written before the field existed), else the SWE-bench record's
        ``problem_statement`` (``env.instance``); None when none is known."""
        if self.instruction is not None:
            return self.instruction
        legacy = self.meta.get(TASK_META)
        if isinstance(legacy, str) and legacy:
            return legacy
        record = self.env.instance.record if self.env.instance is not None else None
        if record is not None and record.problem_statement:
            return record.problem_statement
        return None

    def with_observations(
        self, observations: list[Observation], source: Literal["real", "sim"], **meta: Any
    ) -> Trajectory:
        """A copy whose steps carry *observations* (one per step, in order)."""
        if len(observations) != len(self.steps):
            raise ValueError(f"{len(observations)} observations for {len(self.steps)} steps")
        steps = [
            Step(action=s.action, observation=o, control=s.control)
            for s, o in zip(self.steps, observations, strict=True)
        ]
        return self.model_copy(
            update={"steps": steps, "source": source, "meta": {**self.meta, **meta}}
        )


@lru_cache(maxsize=4096)
def command_name(command: str) -> str:
    """The program a shell command line starts: ``cd src && ls -la`` → ``cd``.

    Leading variable assignments and ``sudo``/``env`` are skipped; ``git`` and
    ``python -m`` keep their subcommand (``git log``, ``python -m pytest``).
    Remembered per command line (agents repeat theirs; the comparator and the store
    both ask).
    """
    try:
        words = shlex.split(command.strip().splitlines()[0] if command.strip() else "")
    except ValueError:
        words = command.split()
    return program_name(words)


def program_name(words: Sequence[str]) -> str:
    """:func:`command_name` of a command line already split into shell words."""
    words = [w for w in words if "=" not in w or w.startswith(("-", "/", "."))]
    while words and words[0] in {"sudo", "env", "time", "nohup", "command"}:
        words = words[1:]
    if not words:
        return "?"
    program = words[0].rsplit("/", 1)[-1]
    if program in {"git", "pip", "pip3", "apt", "apt-get", "npm", "cargo", "docker"}:
        sub = next((w for w in words[1:] if not w.startswith("-")), None)
        return f"{program} {sub}" if sub else program
    if program.startswith("python") and len(words) > 2 and words[1] == "-m":
        return f"python -m {words[2]}"
    if program.startswith("python"):
        return "python"
    return program


def stable_hash(value: Any) -> str:
    """SHA-256 of the canonical JSON form of *value* (first 16 hex chars)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
