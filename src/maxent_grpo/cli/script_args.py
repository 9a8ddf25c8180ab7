"""What `maxent-grpo train` needs besides the config: the model, the data set and the reward functions, by name.

`TrainScriptArguments` holds the names (as TRL's `ScriptArguments` does for its scripts); the loaders turn them into
objects for `MaxEntGRPOTrainer` and raise `UsageError` with one clear sentence when an input cannot be used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, IterableDataset, load_dataset
from transformers.utils import is_bitsandbytes_available, is_peft_available
from trl import ModelConfig, ScriptArguments, get_peft_config, get_quantization_config

from maxent_grpo.cli.embedded_model import resolve_smollm2
from maxent_grpo.cli.model_dir_checks import check_architecture, check_model_dir, load_model_config
from maxent_grpo.cli.reward_contract import TRL_REWARD_KWARGS, check_signature
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.demo import vowel_dataset
from maxent_grpo.rewards import REWARDS
from maxent_grpo.smollm2 import SMOLLM2
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.training.checkpoints import resume

TINY_MODEL = "tiny"
VOWELS_DATASET = "vowels"
DEFAULT_VOWEL_PROMPTS = 1024
VOWEL_EVAL_PROMPTS = 64

# Keyword arguments TRL passes to every reward function; any other parameter without a default is a dataset column.
_TRL_REWARD_KWARGS = {*TRL_REWARD_KWARGS, "environments"}
_DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}


@dataclass(kw_only=True)
class TrainScriptArguments(ScriptArguments):
    """The data set and reward functions of `maxent-grpo train`, on top of TRL's `ScriptArguments`.

    From TRL's `ScriptArguments` (same names and meaning as in `trl grpo`): `dataset_name` (here also a local
    .json/.jsonl/.csv/.parquet/.txt file or directory, or 'vowels' for the bundled prompts), `dataset_config`,
    `dataset_train_split`, `dataset_test_split` (loaded when `eval_strategy` is not 'no'), `dataset_streaming` and
    `ignore_bias_buffers`. The model comes from TRL's `ModelConfig`; every other field is `MaxEntGRPOConfig`'s.
    """

    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={
            "help": f"Reward functions: names from {sorted(REWARDS)} (see maxent_grpo.rewards) or dotted paths to "
            "your own, 'package.module.function' or 'package.module:function' (the module on the working directory "
            "or installed)."
        },
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A reward model (Hub name or local directory), loaded as a sequence-classification model with "
            "one label, as TRL's grpo script does; scored before the reward functions."
        },
    )
    dataset_prompt_column: str = field(
        default="prompt",
        metadata={"help": "Column holding the prompts (text or chat messages); renamed to 'prompt' for training."},
    )
    dataset_answer_column: str | None = field(
        default=None,
        metadata={
            "help": "Column holding reference answers, renamed to 'answer' (the column `boxed_answer` reads). "
            "None: the data set's columns are passed to the rewards as they are."
        },
    )
    dataset_num_prompts: int | None = field(
        default=None,
        metadata={
            "help": f"Train on the first N prompts only. None: the whole split ({DEFAULT_VOWEL_PROMPTS} prompts for "
            "'vowels')."
        },
    )


def load_train_dataset(args: TrainScriptArguments) -> Dataset | IterableDataset:
    """Load `dataset_train_split`, rename the prompt / answer columns and keep the first `dataset_num_prompts` rows."""
    if args.dataset_num_prompts is not None and args.dataset_num_prompts < 1:
        raise UsageError(f"dataset_num_prompts={args.dataset_num_prompts} is invalid: expected an integer >= 1")
    if args.dataset_name == VOWELS_DATASET:
        return vowel_dataset(args.dataset_num_prompts or DEFAULT_VOWEL_PROMPTS)
    dataset = _load_prompts(args, args.dataset_train_split)
    if args.dataset_num_prompts is None:
        return dataset
    if isinstance(dataset, IterableDataset):
        return dataset.take(args.dataset_num_prompts)
    return dataset.select(range(min(args.dataset_num_prompts, len(dataset))))


def load_eval_dataset(args: TrainScriptArguments, config: MaxEntGRPOConfig) -> Dataset | IterableDataset | None:
    """`dataset_test_split` when the run evaluates (`eval_strategy` is not 'no'), as TRL's `grpo` script loads it."""
    if config.eval_strategy == "no":
        return None
    if args.dataset_name == VOWELS_DATASET:
        return vowel_dataset(VOWEL_EVAL_PROMPTS)
    return _load_prompts(args, args.dataset_test_split)


def check_streaming(args: TrainScriptArguments, config: MaxEntGRPOConfig) -> None:
    """A streamed data set has no length and no random access: it needs `max_steps` and rules out dynamic sampling."""
    if not args.dataset_streaming or args.dataset_name == VOWELS_DATASET:
        return
    if config.max_steps <= 0:
        raise UsageError("dataset_streaming=True needs max_steps: a streamed data set has no length to count epochs")
    if config.dynamic_sampling:
        raise UsageError(
            "dataset_streaming=True cannot be combined with dynamic_sampling, which draws replacement prompts from "
            "anywhere in the data set"
        )


def dataset_columns(dataset: Dataset | IterableDataset) -> list[str]:
    """The column names; a streamed data set whose features are not declared is asked for its first row."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    first = next(iter(dataset), None)
    return list(first) if first is not None else []


def _load_prompts(args: TrainScriptArguments, split: str) -> Dataset | IterableDataset:
    dataset = _load_split(args, split)
    dataset = _rename_column(dataset, args.dataset_prompt_column, "prompt", args.dataset_name)
    if args.dataset_answer_column is not None:
        dataset = _rename_column(dataset, args.dataset_answer_column, "answer", args.dataset_name)
    return dataset


def _load_split(args: TrainScriptArguments, split: str) -> Dataset | IterableDataset:
    path = Path(args.dataset_name)
    if path.is_file() and path.suffix not in _DATA_FILE_BUILDERS:
        raise UsageError(
            f"dataset file {args.dataset_name!r} has an unsupported extension: expected one of "
            f"{sorted(_DATA_FILE_BUILDERS)}"
        )
    try:
        if path.is_file():
            return load_dataset(
                _DATA_FILE_BUILDERS[path.suffix], data_files=str(path), split=split, streaming=args.dataset_streaming
            )
        return load_dataset(args.dataset_name, name=args.dataset_config, split=split, streaming=args.dataset_streaming)
    except (OSError, ValueError) as error:  # not found, unreachable, or an unknown split / configuration
        raise UsageError(f"cannot load dataset {args.dataset_name!r} (split {split!r}): {error}") from error


def _rename_column(
    dataset: Dataset | IterableDataset, source: str, target: str, name: str
) -> Dataset | IterableDataset:
    columns = dataset_columns(dataset)
    if source not in columns:
        setting = "dataset_prompt_column" if target == "prompt" else "dataset_answer_column"
        raise UsageError(
            f"dataset {name!r} has no {source!r} column (columns: {columns}); set {setting} to the "
            f"column that holds the {target}s"
        )
    if source == target:
        return dataset
    if target in columns:
        raise UsageError(f"dataset {name!r} has both a {source!r} and a {target!r} column; drop one of them first")
    return dataset.rename_column(source, target)


def check_reward_columns(
    reward_funcs: list[Callable[..., list[float]] | str], dataset: Dataset | IterableDataset
) -> None:
    """Every column a reward function requires (a parameter without a default) must be in the data set, and its
    signature must take the keyword arguments TRL passes."""
    columns = dataset_columns(dataset)
    for func in reward_funcs:
        if isinstance(func, str):  # a reward model reads the prompts and completions only
            continue
        for parameter in inspect.signature(func).parameters.values():
            required = parameter.default is inspect.Parameter.empty and parameter.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and parameter.name not in _TRL_REWARD_KWARGS and parameter.name not in columns:
                raise UsageError(
                    f"reward function {func.__name__} needs the {parameter.name!r} column, which the dataset lacks "
                    f"(columns: {columns}); set dataset_answer_column"
                )
        check_signature(func, func.__name__, columns)


def check_generation_backend(config: MaxEntGRPOConfig) -> None:
    """vLLM generation (`use_vllm`) needs the vllm package here in colocate mode and in server mode with the NCCL
    weight transfer; server mode with the disk transfer needs only HTTP and a shared directory
    (`selection.vllm_install_problem`)."""
    from maxent_grpo.training.generation.backends.selection import vllm_install_problem

    if (problem := vllm_install_problem(config)) is not None:
        raise UsageError(problem)


def resolve_resume_checkpoint(config: MaxEntGRPOConfig) -> None:
    """Point `resume_from_checkpoint` at the checkpoint folder it names ('true', an output_dir, or a checkpoint)."""
    try:
        config.resume_from_checkpoint = resume.resolve_resume_checkpoint(
            config.resume_from_checkpoint, config.output_dir
        )
    except resume.CheckpointNotFoundError as error:
        raise UsageError(str(error)) from error


def _check_lora_settings(model_args: ModelConfig) -> None:
    """PEFT installed, and the LoRA values PEFT only rejects once it wraps the model (after the model has loaded)."""
    if not is_peft_available():
        raise UsageError("use_peft=True needs PEFT, which is not installed: pip install 'maxent-grpo[peft]'")
    if model_args.lora_r < 1:
        raise UsageError(f"lora_r={model_args.lora_r} is invalid: expected an integer >= 1")
    if not 0 <= model_args.lora_dropout < 1:
        raise UsageError(f"lora_dropout={model_args.lora_dropout} is invalid: expected a number in [0, 1)")


def load_model(model_args: ModelConfig, config: MaxEntGRPOConfig) -> dict[str, Any]:
    """The model arguments of `MaxEntGRPOTrainer`, set up as TRL's `grpo` script does from `ModelConfig`.

    ``smollm2`` names the embedded real model's folder (`resolve_smollm2`), then loads like any local folder.

    Returns `model` (the tiny model built in-process, or a name TRL loads with `config.model_init_kwargs`, which get
    `model_revision`, `dtype` and `attn_implementation`), `processing_class` (None: TRL loads the model's),
    `peft_config` (`get_peft_config`: LoRA with `use_peft`) and `quantization_config` (`get_quantization_config`).
    """
    if model_args.use_peft:
        _check_lora_settings(model_args)
    try:
        peft_config = get_peft_config(model_args)
    except ValueError as error:  # a LoRA setting PEFT rejects
        raise UsageError(f"LoRA settings: {error}") from error
    quantization_config = get_quantization_config(model_args)
    if model_args.model_name_or_path == SMOLLM2:
        model_args.model_name_or_path = str(resolve_smollm2())
    name = model_args.model_name_or_path
    if name == TINY_MODEL:
        if quantization_config is not None:
            raise UsageError(
                "load_in_4bit / load_in_8bit quantize a model while it loads from the Hub or a directory; the 'tiny' "
                "model is built in-process"
            )
        tokenizer = build_tiny_tokenizer()
        model = build_tiny_model(tokenizer, seed=config.seed, max_completion_length=config.max_completion_length)
        if model_args.dtype not in (None, "auto"):
            model = model.to(getattr(torch, model_args.dtype))
        if model_args.attn_implementation is not None:
            try:
                model.set_attn_implementation(model_args.attn_implementation)
            except (ValueError, ImportError) as error:  # unknown name, or a kernel that is not installed
                raise UsageError(f"attn_implementation={model_args.attn_implementation!r}: {error}") from error
        return {"model": model, "processing_class": tokenizer, "peft_config": peft_config}
    if quantization_config is not None and not is_bitsandbytes_available():
        raise UsageError(
            "load_in_4bit / load_in_8bit need bitsandbytes, which is not installed: pip install bitsandbytes"
        )
    local = Path(name).expanduser()
    if name.startswith((".", "/", "~")) and not local.is_dir():
        raise UsageError(f"cannot load model {name!r}: no such directory")
    model_config = load_model_config(name, model_args.model_revision, config.trust_remote_code)
    check_architecture(name, model_config, model_args.attn_implementation)
    if local.is_dir():
        check_model_dir(name)
    config.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": config.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(config.model_init_kwargs or {}),
    }
    return {
        "model": name,
        "processing_class": None,
        "peft_config": peft_config,
        "quantization_config": quantization_config,
    }


def ignore_bool_buffers(model: torch.nn.Module) -> None:
    """`ignore_bias_buffers`: DDP leaves the model's boolean buffers (attention masks) alone, as TRL's scripts do."""
    model._ddp_params_and_buffers_to_ignore = [
        name for name, buffer in model.named_buffers() if buffer.dtype == torch.bool
    ]
