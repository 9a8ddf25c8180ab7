"""Every recipe parses with the CLI's parser into valid dataclasses, and every accelerate config is one accelerate
accepts, without training or downloading anything."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
import yaml
from accelerate.commands.config.config_args import ClusterConfig
from accelerate.commands.launch import launch_command_parser
from accelerate.utils import DistributedType
from trl import ModelConfig

from maxent_grpo import demo
from maxent_grpo.cli.commands import vllm_serve
from maxent_grpo.cli.recipe import parse_train_args
from maxent_grpo.cli.reward_loading import load_reward_funcs
from maxent_grpo.cli.script_args import (
    TrainScriptArguments,
    check_reward_columns,
    load_model,
    load_train_dataset,
)
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.rewards import REWARDS

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
RECIPES = sorted((CONFIGS / "recipes").glob("*.yaml"))
ACCELERATE_CONFIGS = sorted((CONFIGS / "accelerate").glob("*.yaml"))


def _parse(recipe: Path) -> tuple[TrainScriptArguments, MaxEntGRPOConfig, ModelConfig]:
    # GPU recipes ask for bf16, which transformers refuses to configure on a machine without a GPU unless use_cpu.
    on_cpu = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    return parse_train_args(["--config", str(recipe), *on_cpu])


def test_the_documented_files_exist():
    assert {p.stem for p in RECIPES} == {"demo", "tldr_unique_chars", "math_boxed", "qwen3_0.6b_server"}
    assert {p.stem for p in ACCELERATE_CONFIGS} == {
        "ddp", "ddp_beside_server", "zero2", "zero3", "multi_cpu", "multi_node"
    }  # fmt: skip


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_parses_into_valid_dataclasses(recipe):
    script_args, config, model_args = _parse(recipe)
    assert isinstance(config, MaxEntGRPOConfig)
    assert model_args.model_name_or_path and script_args.dataset_name
    assert set(script_args.reward_funcs) <= set(REWARDS)
    assert config.generation_batch_size % config.num_generations == 0
    assert config.output_dir.startswith("outputs/")


def test_tldr_recipe_is_the_trl_pull_request_benchmark():
    script_args, config, model_args = _parse(CONFIGS / "recipes" / "tldr_unique_chars.yaml")
    assert (model_args.model_name_or_path, script_args.dataset_name, script_args.dataset_train_split) == (
        "Qwen/Qwen3-0.6B-Base",
        "trl-lib/tldr",
        "train[:500]",
    )
    assert script_args.reward_funcs == ["unique_chars"]
    settings = {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 8,
        "num_generations": 4,
        "max_completion_length": 256,
        "steps_per_generation": 4,
        "logging_steps": 1,
        "num_train_epochs": 1,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "report_to": ["trackio"],
        "maxent_objective": "grpo",
    }
    assert {name: getattr(config, name) for name in settings} == settings


def test_math_recipe_rewards_the_boxed_answer_over_distinct_answers():
    script_args, config, _ = _parse(CONFIGS / "recipes" / "math_boxed.yaml")
    assert script_args.reward_funcs == ["boxed_answer"]
    assert script_args.dataset_answer_column is not None  # boxed_answer reads the "answer" column
    assert (config.maxent_objective, config.maxent_mode_key) == ("listwise", "boxed")


def test_demo_recipe_builds_its_model_and_data_offline():
    script_args, config, model_args = _parse(CONFIGS / "recipes" / "demo.yaml")
    assert config.use_cpu and (config.maxent_objective, config.maxent_mode_key) == ("listwise", "first_token")
    # The task of `maxent-grpo demo` (which prints this recipe as the next command): groups of the same size.
    group = demo.TASK.num_generations
    assert (config.per_device_train_batch_size, config.num_generations) == (group, group)
    assert config.maxent_mode_key == demo.TASK.mode_key
    dataset = load_train_dataset(script_args)
    check_reward_columns(load_reward_funcs(script_args.reward_funcs), dataset)
    model = load_model(model_args, config)
    assert set(dataset["prompt"]) == {demo.VOWEL_PROMPT}
    assert model["model"].config.vocab_size == len(model["processing_class"])


def test_the_two_gpu_recipe_is_server_mode_against_vllm_serve_with_every_field_as_written():
    recipe = CONFIGS / "recipes" / "qwen3_0.6b_server.yaml"
    written = yaml.safe_load(recipe.read_text())
    script_args, config, model_args = _parse(recipe)  # offline: the model's name is not resolved
    for name, value in written.items():  # every field arrives as the recipe writes it
        parsed = next(getattr(args, name) for args in (script_args, config, model_args) if hasattr(args, name))
        assert parsed == ([value] if name == "report_to" else value), name
    assert model_args.model_name_or_path == "Qwen/Qwen3-0.6B" and config.chat_template_kwargs == {
        "enable_thinking": False
    }
    assert set(script_args.reward_funcs) <= set(REWARDS) and script_args.dataset_answer_column is not None
    # Server mode against what `maxent-grpo vllm-serve` starts by default, the transfer following the server.
    serve = vllm_serve.parser("vllm-serve", argparse.ArgumentParser).parse_args([model_args.model_name_or_path])
    assert (config.use_vllm, config.vllm_mode, config.vllm_weight_transfer) == (True, "server", "auto")
    assert config.vllm_server_base_url == f"http://{serve.host}:{serve.port}"
    assert config.bf16 and model_args.dtype == "float32"  # float32 weights, bfloat16 compute
    assert (config.maxent_objective, config.maxent_mode_key) == ("listwise", "boxed")
    # The commands at the top of the recipe and of the GPU page are the same two.
    page = (CONFIGS.parent / "docs" / "guide" / "gpus.md").read_text()
    commands = [line.strip("# ").strip() for line in recipe.read_text().splitlines() if "CUDA_VISIBLE_DEVICES" in line]
    assert len(commands) == 2 and all(command in page for command in commands), commands
    assert commands[0] == f"CUDA_VISIBLE_DEVICES=0 maxent-grpo vllm-serve {model_args.model_name_or_path}"
    assert commands[1] == f"CUDA_VISIBLE_DEVICES=1 maxent-grpo train --config configs/recipes/{recipe.name}"


def test_the_accelerate_config_beside_a_server_leaves_the_server_gpu_out():
    config = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / "ddp_beside_server.yaml")
    gpus = [int(gpu) for gpu in str(config.gpu_ids).split(",")]
    assert config.distributed_type == DistributedType.MULTI_GPU and config.mixed_precision == "bf16"
    assert 0 not in gpus and gpus == list(range(1, 8)) and config.num_processes == len(gpus)


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.stem)
def test_accelerate_config_is_valid(path):
    config = ClusterConfig.from_yaml_file(path)  # rejects unknown keys and unknown distributed types
    assert config.compute_environment.value == "LOCAL_MACHINE"
    if path.stem == "multi_node":  # one process per machine; rank and node 0's address given at launch
        assert config.num_machines == 2 and config.num_processes == 2
    else:
        assert config.num_machines == 1 and config.num_processes >= 2
    launch_options = {action.dest for action in launch_command_parser()._actions}
    assert set(config.deepspeed_config) <= launch_options  # keys `accelerate launch` maps to its own options


def test_several_servers_come_from_the_command_line_as_a_list():
    argv = ["--model_name_or_path", "m", "--dataset_name", "d", "--output_dir", "outputs/x", "--use_cpu", "true"]
    argv += ["--use_vllm", "true", "--vllm_mode", "server"]
    argv += ["--vllm_server_base_urls", "http://a:8000", "http://b:8000"]
    _, config, _ = parse_train_args(argv)
    assert config.vllm_server_base_urls == ["http://a:8000", "http://b:8000"]
    assert config.vllm_server_base_url == "http://a:8000"


@pytest.mark.parametrize(("name", "stage"), [("zero2", 2), ("zero3", 3)])
def test_deepspeed_configs(name, stage):
    config = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / f"{name}.yaml")
    assert config.distributed_type == DistributedType.DEEPSPEED
    assert config.deepspeed_config["zero_stage"] == stage


def test_multi_cpu_config_starts_two_processes_on_the_cpu():
    config = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / "multi_cpu.yaml")
    # MULTI_GPU is the type for which accelerate starts local processes through torchrun; use_cpu keeps them on CPU.
    assert config.distributed_type == DistributedType.MULTI_GPU
    assert config.use_cpu and config.num_processes == 2 and config.mixed_precision == "no"
