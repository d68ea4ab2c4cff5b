"""Environment defaults (``--env-defaults FILE``): checked at the edge, layered under the
command's options and over BrowserGym's ``WA_*`` variables; a ``fidelity-env.toml`` that came
beside the data is never read on its own (it is untrusted, like the data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.cli.bundles import WorldOptions
from fidelity.env_defaults import DEFAULTS_FILE, load_env_defaults, unread_env_defaults
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import close_pools
from fidelity.trajectory import CommandAction, EnvSpec, Step, Trajectory


def _suite(folder: Path, images: list[str | None]) -> Path:
    """Terminal trajectories on the docker backend, each with the given own image (or none)."""
    folder.mkdir(parents=True, exist_ok=True)
    trajectories = [
        Trajectory(
            id=f"t{i}",
            domain="terminal",
            env=EnvSpec(backend="docker", image=image),
            steps=[Step(action=CommandAction(command="echo hi"))],
        )
        for i, image in enumerate(images)
    ]
    path = folder / "suite.jsonl"
    write_trajectories(path, trajectories)
    return path


def test_a_file_beside_the_data_is_seen_but_read_only_when_named(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "data", [None])
    assert unread_env_defaults(suite) is None and unread_env_defaults(None) is None
    (tmp_path / "data" / DEFAULTS_FILE).write_text(
        'image = "acme/runtime:1"\ninstances = "records/swe-gym.jsonl"\n'
        'instance_images = "swe-gym"\n[sites.shopping]\nurl = "http://shop.test:7770"\n'
    )
    assert (
        unread_env_defaults(suite)
        == unread_env_defaults(tmp_path / "data")
        == (tmp_path / "data" / DEFAULTS_FILE)
    )
    unnamed = WorldOptions().resolve(suite)
    assert unnamed.image is None and "sites" not in unnamed.options
    defaults = load_env_defaults(tmp_path / "data" / DEFAULTS_FILE)
    assert defaults.image == "acme/runtime:1" and defaults.instance_images == "swe-gym"
    assert defaults.instances == tmp_path / "data" / "records" / "swe-gym.jsonl"
    assert defaults.sites["shopping"].url == "http://shop.test:7770"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('image = "Not An Image"\n', "image: String should match pattern"),
        ('imagee = "acme/runtime:1"\n', "imagee: Extra inputs are not permitted"),
        ('instance_images = "swe-smith"\n', "instance_images: Input should be 'swebench'"),
        ("[sites.Shop]\nurl = 'http://x.test'\n", "sites.Shop.[key]: String should match"),
        ('image = "a\n', "invalid TOML"),
    ],
)
def test_a_bad_file_names_itself_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / DEFAULTS_FILE
    path.write_text(text)
    with pytest.raises(InputFormatError) as raised:
        load_env_defaults(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


def test_a_bad_named_file_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    suite = _suite(tmp_path, [None])
    (tmp_path / DEFAULTS_FILE).write_text('image = "Not An Image"\n')
    out = tmp_path / "real.jsonl"
    named = ["--env-defaults", str(tmp_path / DEFAULTS_FILE)]
    result = CliRunner().invoke(app, ["replay", str(suite), "-o", str(out), *named])
    assert result.exit_code == 2
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith(f"error: {tmp_path / DEFAULTS_FILE}: image: ")
    assert not out.exists()


def test_sites_layer_variables_then_file_then_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WA_SHOPPING", "http://wa-shop.test:7770")
    monkeypatch.setenv("WA_REDDIT", "http://wa-reddit.test:9999")
    (tmp_path / DEFAULTS_FILE).write_text(
        "[sites.shopping]\nreset = 'docker restart shopping'\n"
        "[sites.reddit]\nurl = 'http://file-reddit.test:9999'\n"
        "[sites.wiki]\nurl = 'http://file-wiki.test:8888'\n"
    )
    world = WorldOptions(
        env_defaults=tmp_path / DEFAULTS_FILE, site=["reddit=http://cli-reddit.test:9999"]
    ).resolve(tmp_path / "data.jsonl")
    options = world.options
    assert world.image is None
    assert world.trust.site_origins == {
        "http://wa-shop.test:7770",
        "http://cli-reddit.test:9999",
        "http://file-wiki.test:8888",
    }
    assert options["sites"]["shopping"] == {
        "url": "http://wa-shop.test:7770",
        "reset": "docker restart shopping",
    }
    assert options["sites"]["reddit"] == {"url": "http://cli-reddit.test:9999"}
    assert options["sites"]["wiki"] == {"url": "http://file-wiki.test:8888"}


def test_without_a_file_nothing_changes(tmp_path: Path) -> None:
    world = WorldOptions().resolve(tmp_path / "s.jsonl")
    assert world.image is None
    assert world.options == {"trust_commands": False, "pull": False, "pull_registries": []}
    assert not world.trust.commands


@pytest.mark.docker
def test_the_file_image_is_the_default_under_the_option_and_the_trajectory(
    tmp_path: Path, docker: None
) -> None:
    swe, terminal = ensure_image("swe"), ensure_image("terminal")
    suite = _suite(tmp_path, [None, terminal])
    (tmp_path / DEFAULTS_FILE).write_text(f'image = "{swe}"\n')
    runner = CliRunner()

    def replayed(*extra: str) -> dict[str, str | None]:
        out = tmp_path / "real.jsonl"
        result = runner.invoke(
            app, ["replay", str(suite), "-o", str(out), "--sandbox", "docker", "--json", *extra]
        )
        close_pools()
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["unverifiable"] == {}
        return {t.id: t.env.image for t in read_trajectories(out)}

    named = ("--env-defaults", str(tmp_path / DEFAULTS_FILE))
    assert replayed() == {"t0": None, "t1": terminal}  # beside the data: not read
    assert replayed(*named) == {"t0": swe, "t1": terminal}  # the file's image; the own one wins
    assert replayed("--image", terminal, *named) == {"t0": terminal, "t1": terminal}  # option wins
    other = tmp_path / "other.toml"
    other.write_text(f'image = "{terminal}"\n')
    assert replayed("--env-defaults", str(other)) == {"t0": terminal, "t1": terminal}
