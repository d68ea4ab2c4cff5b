"""Small terminal trajectories built in code, for tests and benchmarks."""

from __future__ import annotations

from fidelity.trajectory import CommandAction, Observation, Step, Trajectory


def command_trajectory(
    trajectory_id: str, *commands: str, workdir: str | None = None
) -> Trajectory:
    """A terminal trajectory of command actions (no observations)."""
    env = {"workdir": workdir} if workdir else {}
    return Trajectory.model_validate(
        {
            "id": trajectory_id,
            "domain": "terminal",
            "env": env,
            "steps": [Step(action=CommandAction(command=c)).model_dump() for c in commands],
        }
    )


def build_trajectory(
    tid: str = "t-1",
    commands: tuple[str, ...] = ("ls", "cat README.md", "echo hi"),
    texts: tuple[str, ...] | None = None,
    description: str | None = "A Python project checked out in /workspace.",
) -> Trajectory:
    """A terminal trajectory whose steps all carry observations."""
    texts = texts or tuple(f"out of {c}\n" for c in commands)
    steps = [
        Step(action=CommandAction(command=c), observation=Observation(text=t, exit_code=0))
        for c, t in zip(commands, texts, strict=True)
    ]
    return Trajectory(
        id=tid,
        domain="terminal",
        env={"description": description, "env": {"LANG": "C.UTF-8"}},
        steps=steps,
        source="real",
    )
