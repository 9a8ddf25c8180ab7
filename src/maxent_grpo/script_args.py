"""What `maxent-grpo train` needs besides the config: the model, the data set and the reward functions, by name.

`TrainScriptArguments` holds the names (as TRL's `ScriptArguments` does for its scripts); the loaders turn them into
objects for `MaxEntGRPOTrainer` and raise `UsageError` with one clear sentence when an input cannot be used.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, load_dataset
from transformers import AutoConfig, PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.demo import vowel_dataset
from maxent_grpo.rewards import REWARDS
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.usage_error import UsageError

TINY_MODEL = "tiny"
VOWELS_DATASET = "vowels"
DEFAULT_VOWEL_PROMPTS = 1024

# Keyword arguments TRL passes to every reward function; any other parameter without a default is a dataset column.
_TRL_REWARD_KWARGS = {
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
    "environments",
}
_DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}


@dataclass
class TrainScriptArguments:
    """Model, data set and reward functions of `maxent-grpo train`; every other field is `MaxEntGRPOConfig`'s."""

    model_name_or_path: str = field(
        metadata={
            "help": "Model to train: a Hub name, a local directory saved with `save_pretrained`, or 'tiny' for the "
            "tiny offline model built in-process (character-level tokenizer)."
        },
    )
    dataset_name: str = field(
        metadata={
            "help": "Training prompts: a Hub data set name, a local directory, a local .json/.jsonl/.csv/.parquet/.txt"
            " file (.txt: one prompt per line, in a 'text' column), or 'vowels' for the bundled mode-coverage "
            "prompts ('pick a vowel:')."
        },
    )
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
    dataset_config: str | None = field(
        default=None, metadata={"help": "Configuration name of the data set (the `name` of `datasets.load_dataset`)."}
    )
    dataset_split: str = field(
        default="train", metadata={"help": "Split to train on; slices work, e.g. 'train[:500]'."}
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


def load_train_dataset(args: TrainScriptArguments) -> Dataset:
    """Load the training split, rename the prompt / answer columns and keep the first `dataset_num_prompts` rows."""
    if args.dataset_num_prompts is not None and args.dataset_num_prompts < 1:
        raise UsageError(f"dataset_num_prompts={args.dataset_num_prompts} is invalid: expected an integer >= 1")
    if args.dataset_name == VOWELS_DATASET:
        return vowel_dataset(args.dataset_num_prompts or DEFAULT_VOWEL_PROMPTS)
    dataset = _load_split(args)
    dataset = _rename_column(dataset, args.dataset_prompt_column, "prompt", args.dataset_name)
    if args.dataset_answer_column is not None:
        dataset = _rename_column(dataset, args.dataset_answer_column, "answer", args.dataset_name)
    if args.dataset_num_prompts is not None:
        dataset = dataset.select(range(min(args.dataset_num_prompts, len(dataset))))
    return dataset


def _load_split(args: TrainScriptArguments) -> Dataset:
    path = Path(args.dataset_name)
    if path.is_file() and path.suffix not in _DATA_FILE_BUILDERS:
        raise UsageError(
            f"dataset file {args.dataset_name!r} has an unsupported extension: expected one of "
            f"{sorted(_DATA_FILE_BUILDERS)}"
        )
    try:
        if path.is_file():
            return load_dataset(_DATA_FILE_BUILDERS[path.suffix], data_files=str(path), split=args.dataset_split)
        return load_dataset(args.dataset_name, name=args.dataset_config, split=args.dataset_split)
    except (OSError, ValueError) as error:  # not found, unreachable, or an unknown split / configuration
        raise UsageError(
            f"cannot load dataset {args.dataset_name!r} (split {args.dataset_split!r}): {error}"
        ) from error


def _rename_column(dataset: Dataset, source: str, target: str, name: str) -> Dataset:
    if source not in dataset.column_names:
        setting = "dataset_prompt_column" if target == "prompt" else "dataset_answer_column"
        raise UsageError(
            f"dataset {name!r} has no {source!r} column (columns: {dataset.column_names}); set {setting} to the "
            f"column that holds the {target}s"
        )
    if source == target:
        return dataset
    if target in dataset.column_names:
        raise UsageError(f"dataset {name!r} has both a {source!r} and a {target!r} column; drop one of them first")
    return dataset.rename_column(source, target)


def check_reward_columns(reward_funcs: list[Callable[..., list[float]] | str], dataset: Dataset) -> None:
    """Every column a reward function requires (a parameter without a default) must be in the data set."""
    for func in reward_funcs:
        if isinstance(func, str):  # a reward model reads the prompts and completions only
            continue
        for parameter in inspect.signature(func).parameters.values():
            required = parameter.default is inspect.Parameter.empty and parameter.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and parameter.name not in _TRL_REWARD_KWARGS and parameter.name not in dataset.column_names:
                raise UsageError(
                    f"reward function {func.__name__} needs the {parameter.name!r} column, which the dataset lacks "
                    f"(columns: {dataset.column_names}); set dataset_answer_column"
                )


def check_generation_backend(config: MaxEntGRPOConfig) -> None:
    """vLLM generation (`use_vllm`) needs the vllm package."""
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UsageError(
            f"use_vllm=True (vllm_mode={config.vllm_mode!r}) needs vLLM, which is not installed: "
            "pip install 'maxent-grpo[vllm]', or set use_vllm to false to generate with transformers"
        )


def check_resume_checkpoint(config: MaxEntGRPOConfig) -> None:
    """`resume_from_checkpoint` must name an existing checkpoint directory."""
    if config.resume_from_checkpoint is not None and not Path(config.resume_from_checkpoint).is_dir():
        raise UsageError(
            f"resume_from_checkpoint={config.resume_from_checkpoint!r} is not a directory: expected a checkpoint "
            "folder such as <output_dir>/checkpoint-<step>"
        )


def load_model(
    args: TrainScriptArguments, config: MaxEntGRPOConfig
) -> tuple[PreTrainedModel | str, PreTrainedTokenizerBase | None]:
    """The model (or its name, which TRL loads with `model_init_kwargs`) and its tokenizer (None: TRL loads it)."""
    if args.model_name_or_path == TINY_MODEL:
        tokenizer = build_tiny_tokenizer()
        model = build_tiny_model(tokenizer, seed=config.seed, max_completion_length=config.max_completion_length)
        return model, tokenizer
    local = Path(args.model_name_or_path).expanduser()
    if args.model_name_or_path.startswith((".", "/", "~")) and not local.is_dir():
        raise UsageError(f"cannot load model {args.model_name_or_path!r}: no such directory")
    try:
        AutoConfig.from_pretrained(args.model_name_or_path, trust_remote_code=config.trust_remote_code)
    except OSError as error:  # neither a local model directory nor a reachable Hub model
        raise UsageError(f"cannot load model {args.model_name_or_path!r}: {error}") from error
    return args.model_name_or_path, None
