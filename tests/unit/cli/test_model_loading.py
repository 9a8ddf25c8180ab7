"""`load_model` turns TRL's `ModelConfig` into the trainer's model arguments, as TRL's `grpo` script does."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from trl import ModelConfig

from maxent_grpo.cli.script_args import ignore_bool_buffers, load_model
from maxent_grpo.cli.usage_error import UsageError
from tests.support.training import tiny_config


def test_tiny_model_gets_dtype_attention_and_lora(tmp_path):
    model_args = ModelConfig(
        model_name_or_path="tiny", dtype="bfloat16", attn_implementation="eager", use_peft=True, lora_r=4
    )
    loaded = load_model(model_args, tiny_config(tmp_path))
    assert loaded["model"].dtype == torch.bfloat16
    assert loaded["model"].config._attn_implementation == "eager"
    assert isinstance(loaded["peft_config"], LoraConfig) and loaded["peft_config"].r == 4
    assert loaded["processing_class"] is not None


def test_named_model_is_loaded_by_trl_with_the_model_init_kwargs(tmp_path, tiny_model_dir):
    model_args = ModelConfig(
        model_name_or_path=str(tiny_model_dir), model_revision="v1", dtype="float16", attn_implementation="sdpa"
    )
    config = tiny_config(tmp_path, model_init_kwargs={"low_cpu_mem_usage": True, "dtype": "bfloat16"})
    loaded = load_model(model_args, config)
    assert loaded == {
        "model": str(tiny_model_dir),
        "processing_class": None,
        "peft_config": None,
        "quantization_config": None,
    }
    # The recipe's own model_init_kwargs win, as in TRL's script.
    assert config.model_init_kwargs == {
        "revision": "v1",
        "trust_remote_code": False,
        "attn_implementation": "sdpa",
        "dtype": "bfloat16",
        "low_cpu_mem_usage": True,
    }


def test_ignore_bias_buffers_hides_boolean_buffers_from_ddp():
    model = torch.nn.Linear(2, 2)
    model.register_buffer("causal_mask", torch.ones(2, 2, dtype=torch.bool))
    model.register_buffer("scale", torch.ones(2))
    ignore_bool_buffers(model)
    assert model._ddp_params_and_buffers_to_ignore == ["causal_mask"]


def _broken_copy(source: Path, target: Path, break_it: Callable[[Path], object]) -> str:
    shutil.copytree(source, target)
    break_it(target)
    return str(target)


def _shard_index(folder: Path) -> None:
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _config_with(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda d: (d / "config.json").write_text("{not json"), "is not a valid JSON file"),
        (lambda d: _config_with(d, model_type="nope"), "its config.json: The checkpoint you are trying to load has"),
        (lambda d: (d / "model.safetensors").unlink(), "the directory holds no weights (model.safetensors, "),
        (lambda d: (d / "model.safetensors").write_bytes(b"\0" * 64), "model.safetensors is corrupt (Error while"),
        (lambda d: _truncate(d / "model.safetensors"), "model.safetensors is corrupt ("),
        (_shard_index, "names model-00002-of-00002.safetensors, which is missing (1 of 2 shards missing)"),
        (lambda d: (d / "tokenizer.json").unlink() or (d / "tokenizer_config.json").unlink(), "holds no tokenizer"),
    ],
    ids=[
        "config-not-json",
        "unknown-model-type",
        "no-weights",
        "corrupt-weights",
        "truncated-weights",
        "missing-shard",
        "no-tokenizer",
    ],
)
def test_a_model_directory_transformers_cannot_load_is_one_line(break_it, message, tmp_path, tiny_model_dir):
    name = _broken_copy(tiny_model_dir, tmp_path / "model", break_it)
    with pytest.raises(UsageError) as error:
        load_model(ModelConfig(model_name_or_path=name), tiny_config(tmp_path))
    assert str(error.value).startswith(f"cannot load model {name!r}")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_attention_implementation_the_model_cannot_use_is_one_line(tmp_path, tiny_model_dir):
    model_args = ModelConfig(model_name_or_path=str(tiny_model_dir), attn_implementation="nope")
    with pytest.raises(UsageError) as error:
        load_model(model_args, tiny_config(tmp_path))
    assert str(error.value).startswith(
        f"cannot load model {str(tiny_model_dir)!r} with attn_implementation='nope': Specified "
        '`attn_implementation="nope"` is not supported'
    )
