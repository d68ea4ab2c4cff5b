"""A suite's or dataset's ``fidelity-env.toml``: found beside the data, checked at the edge,
layered under the command's options and over BrowserGym's ``WA_*`` variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import _world_options, app
from fidelity.env_defaults import DEFAULTS_FILE, find_env_defaults, load_env_defaults
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.model import CommandAction, EnvSpec, Step, Trajectory
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import close_pools


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


def test_the_file_is_found_beside_a_suite_and_in_a_dataset_folder(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "data", [None])
    assert find_env_defaults(suite) is None and find_env_defaults(None) is None
    (tmp_path / "data" / DEFAULTS_FILE).write_text(
        'image = "acme/runtime:1"\ninstances = "records/swe-gym.jsonl"\n'
        'instance_images = "swe-gym"\n[sites.shopping]\nurl = "http://shop.test:7770"\n'
    )
    assert (
        find_env_defaults(suite)
        == find_env_defaults(tmp_path / "data")
        == (tmp_path / "data" / DEFAULTS_FILE)
    )
    defaults = load_env_defaults(find_env_defaults(suite))
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


def test_a_bad_file_beside_the_suite_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path, [None])
    (tmp_path / DEFAULTS_FILE).write_text('image = "Not An Image"\n')
    out = tmp_path / "real.jsonl"
    result = CliRunner().invoke(app, ["replay", str(suite), "-o", str(out)])
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
    image, options = _world_options(
        tmp_path / "data.jsonl",
        None,
        None,
        ["reddit=http://cli-reddit.test:9999"],
        None,
        None,
        None,
        None,
    )
    assert image is None
    assert options["sites"]["shopping"] == {
        "url": "http://wa-shop.test:7770",
        "reset": "docker restart shopping",
    }
    assert options["sites"]["reddit"] == {"url": "http://cli-reddit.test:9999"}
    assert options["sites"]["wiki"] == {"url": "http://file-wiki.test:8888"}


def test_without_a_file_nothing_changes(tmp_path: Path) -> None:
    assert _world_options(tmp_path / "s.jsonl", None, None, None, None, None, None, None) == (
        None,
        {},
    )


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

    assert replayed() == {"t0": swe, "t1": terminal}  # the file's image; the own one wins
    assert replayed("--image", terminal) == {"t0": terminal, "t1": terminal}  # the option wins
    other = tmp_path / "other.toml"
    other.write_text(f'image = "{terminal}"\n')
    assert replayed("--env-defaults", str(other)) == {"t0": terminal, "t1": terminal}
