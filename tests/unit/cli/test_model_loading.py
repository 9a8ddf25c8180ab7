"""`load_model` turns TRL's `ModelConfig` into the trainer's model arguments, as TRL's `grpo` script does."""

from __future__ import annotations

import torch
from peft import LoraConfig
from trl import ModelConfig

from maxent_grpo.cli.script_args import ignore_bool_buffers, load_model
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
