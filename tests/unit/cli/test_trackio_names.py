"""`maxent-grpo train --report_to trackio` names its trackio project and run, as the demo does (`trackio_names`)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from maxent_grpo.cli.trackio_names import name_trackio_run


def _config(tmp_path, report_to=("trackio",)):
    return SimpleNamespace(
        report_to=list(report_to), output_dir=str(tmp_path / "outputs" / "demo"), project="huggingface", run_name=None
    )


def test_a_trackio_run_is_named_from_its_recipe_and_output_dir(tmp_path):
    recipe = tmp_path / "digits.yaml"
    recipe.write_text("model_name_or_path: m\n")
    config = _config(tmp_path)
    name_trackio_run(config, str(recipe), ["--report_to", "trackio"])
    assert config.project == "maxent-grpo-digits"  # not transformers' "huggingface"
    assert re.fullmatch(r"demo-\d{8}-\d{6}", config.run_name), config.run_name
    without_recipe = _config(tmp_path)
    name_trackio_run(without_recipe, None, [])
    assert without_recipe.project == "maxent-grpo-demo"


def test_names_the_user_set_are_kept(tmp_path):
    recipe = tmp_path / "digits.yaml"
    recipe.write_text("project: mine\n")
    config = _config(tmp_path)
    config.project, config.run_name = "mine", "first"
    name_trackio_run(config, str(recipe), ["--run-name", "first"])
    assert (config.project, config.run_name) == ("mine", "first")
    explicit = _config(tmp_path)  # the default's name, given on purpose
    name_trackio_run(explicit, None, ["--project=huggingface"])
    assert explicit.project == "huggingface" and explicit.run_name is not None


def test_a_run_that_does_not_report_to_trackio_is_left_alone(tmp_path):
    config = _config(tmp_path, report_to=("none",))
    name_trackio_run(config, None, [])
    assert (config.project, config.run_name) == ("huggingface", None)
