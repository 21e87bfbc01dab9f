"""`TrainConfig.to_toml`: what it writes loads back equal, hostile strings included."""

from __future__ import annotations

from pathlib import Path

import tomllib

from v1.train import TrainConfig

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"
HOSTILE = 'a "quoted" \\ back\\slash\nnew line\ttab \x7f del \x00 nul é 😀 ] } = #'


def test_the_recipe_and_hostile_strings_round_trip(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    config = config.model_copy(
        update={
            "output_dir": HOSTILE,
            "rollouts": config.rollouts.model_copy(
                update={"sampling_args": {**config.rollouts.sampling_args, "stop": [HOSTILE, "]"], HOSTILE: {"x y": 1.5e-7}}}
            ),
        }
    )
    text = config.to_toml()
    tomllib.loads(text)  # valid TOML, or this raises
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    assert TrainConfig.load(path) == config
