"""`maxent-grpo train`: train from a YAML recipe and ``--field value`` overrides, the way TRL's scripts do (`recipe`).

Input that cannot be used ends the command with one line on stderr and exit code 2, a run whose every generation
batch was dropped with one line and exit code 1, Ctrl-C with one line naming the checkpoint to resume from and exit
code 130; anything else is a bug and keeps its traceback. torch, transformers and TRL's trainer are imported once the
arguments name a model and a data set, so that ``--help`` answers at once.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxent_grpo.cli.command_errors import Interrupted, TrainingFailed
from maxent_grpo.cli.usage_error import UsageError

if TYPE_CHECKING:
    from accelerate import Accelerator
    from trl import ModelConfig

    from maxent_grpo.cli.script_args import TrainScriptArguments
    from maxent_grpo.config import MaxEntGRPOConfig
    from maxent_grpo.trainer import MaxEntGRPOTrainer


def run(argv: Sequence[str]) -> int:
    """``maxent-grpo train ARGS``: answer ``--help``, check that a model and a data set are named, then train."""
    from maxent_grpo.cli import train_help
    from maxent_grpo.cli.recipe import RecipeParser, check_required_named, split_recipe

    shown = train_help.wants_help(argv)
    if shown == "short":  # no torch, transformers or TRL: answers at once
        print(train_help.short_help(), end="")
        return 0
    if shown == "all":
        RecipeParser().print_help()
        return 0
    # Before anything heavy is imported: a command line without a model or a data set says so at once.
    check_required_named(*split_recipe(argv))
    return _train_run(argv)


def _train_run(argv: Sequence[str]) -> int:
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    import maxent_grpo.cli.run_checks as run_checks
    import maxent_grpo.cli.script_args as inputs
    from maxent_grpo.cli.checkpoint_checks import check_checkpoint
    from maxent_grpo.cli.data_file_checks import dataset_read_errors
    from maxent_grpo.cli.line_progress import (
        LineProgressCallback,
        WatchedProgress,
        full_logs,
        silence_library_progress_bars,
    )
    from maxent_grpo.cli.metrics_file import MetricsFile
    from maxent_grpo.cli.prompt_checks import check_chat_template, check_prompts
    from maxent_grpo.cli.recipe import parse_train_args, split_recipe
    from maxent_grpo.cli.run_summary import summary
    from maxent_grpo.cli.trackio_names import name_trackio_run
    from maxent_grpo.trainer import MaxEntGRPOTrainer
    from maxent_grpo.training.dynamic_sampling import UnknownRewardMetricError
    from maxent_grpo.training.generation.backends.selection import VLLMMissingError
    from maxent_grpo.training.generation.backends.transfer_agreement import WeightTransferMismatchError
    from maxent_grpo.training.generation.contract.protocol import GenerationStopped

    # Dotted paths (reward functions, a custom maxent_mode_key) resolve from the working directory too, as in TRL's
    # scripts.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    script_args, config, model_args = parse_train_args(argv)
    name_trackio_run(config, *split_recipe(argv))
    log_file = not sys.stderr.isatty()  # progress as lines, not carriage-return redraws
    if log_file:
        silence_library_progress_bars()
    reward_funcs = _load_rewards(script_args)
    inputs.check_generation_backend(config)
    inputs.check_streaming(script_args, config)
    inputs.resolve_resume_checkpoint(config)
    if config.resume_from_checkpoint is not None:
        check_checkpoint(config.resume_from_checkpoint, config)
    run_checks.check_output_dir(config.output_dir)
    run_checks.check_report_to(config)
    dataset = _load_dataset(script_args)
    eval_dataset = inputs.load_eval_dataset(script_args, config)
    with dataset_read_errors(script_args.dataset_name):  # a streamed data set is read here first
        chat_prompts = check_prompts(dataset, script_args.dataset_name)
        inputs.check_reward_columns(reward_funcs, dataset)
    if isinstance(dataset, Dataset):  # a streamed data set has no length
        run_checks.check_batch_fits_dataset(config, len(dataset))
    try:
        trainer = MaxEntGRPOTrainer(
            reward_funcs=reward_funcs,
            args=config,
            train_dataset=dataset,
            eval_dataset=eval_dataset,
            **_load_model(model_args, config),
        )
    except UnknownRewardMetricError as error:  # the reward names are known once the trainer has its reward models
        raise UsageError(str(error)) from error
    except (WeightTransferMismatchError, VLLMMissingError) as error:  # known once the vLLM server has been asked
        raise UsageError(str(error)) from error
    except GenerationStopped as error:  # a vLLM server that has not come up within vllm_server_timeout
        raise TrainingFailed(str(error)) from error
    if chat_prompts:
        check_chat_template(trainer.processing_class, model_args.model_name_or_path)
    run_checks.check_logits_fit(config, trainer.model, trainer.accelerator.device)
    if script_args.ignore_bias_buffers:
        inputs.ignore_bool_buffers(trainer.model)
    trainer.add_callback(MetricsFile())
    # transformers' bar (or, with disable_tqdm, its printer) prints every log whole: kept with log_level info / debug.
    watched = WatchedProgress(lines=log_file or config.disable_tqdm)
    if not full_logs(config):
        trainer.pop_callback(ProgressCallback)
        trainer.pop_callback(PrinterCallback)
        trainer.add_callback(watched)
    elif log_file and trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(LineProgressCallback())
    _run(trainer, config)
    if not full_logs(config) and trainer.accelerator.is_main_process:  # the output folder may be on its disk alone
        trackio = config.project if "trackio" in config.report_to else None
        tiny = model_args.model_name_or_path == inputs.TINY_MODEL
        trainer.accelerator.print(
            summary(
                watched,
                steps=trainer.state.global_step,
                output_dir=config.output_dir,
                trackio_project=trackio,
                tiny_model=tiny,
                vllm_installed=importlib.util.find_spec("vllm") is not None,
            )
        )
    elif full_logs(config):
        trainer.accelerator.print(f"Model saved to {config.output_dir}")
    accelerator = trainer.accelerator
    del trainer  # see `end_training`
    end_training(accelerator)
    return 0


def _load_rewards(script_args: TrainScriptArguments) -> list:
    from maxent_grpo.cli.reward_loading import load_reward_funcs

    return load_reward_funcs(script_args.reward_funcs, script_args.reward_model_name_or_path)


def _load_dataset(script_args: TrainScriptArguments):
    import maxent_grpo.cli.script_args as inputs
    from maxent_grpo.cli.data_file_checks import check_data_file, dataset_read_errors
    from maxent_grpo.cli.hub_access import check_source

    name = script_args.dataset_name
    if name != inputs.VOWELS_DATASET:
        check_source(name, "dataset")
        check_data_file(name)
    with dataset_read_errors(name):
        return inputs.load_train_dataset(script_args)


def _load_model(model_args: ModelConfig, config: MaxEntGRPOConfig) -> dict[str, Any]:
    import maxent_grpo.cli.script_args as inputs
    from maxent_grpo.cli.hub_access import check_model_source

    if model_args.model_name_or_path not in (inputs.TINY_MODEL, inputs.SMOLLM2):
        check_model_source(model_args.model_name_or_path)
    return inputs.load_model(model_args, config)


def interrupted_message(output_dir: str) -> str:
    """One line: interrupted, and the ``--resume_from_checkpoint`` to continue with (if any checkpoint is complete)."""
    from transformers.trainer_utils import sort_checkpoints

    from maxent_grpo.training.checkpoints.resume import is_complete

    complete = [path for path in map(Path, sort_checkpoints(output_dir)) if is_complete(path)]
    if not complete:
        return f"interrupted before a checkpoint was saved in {output_dir!r}; nothing to resume from"
    return f"interrupted; continue with --resume_from_checkpoint {complete[-1]}"


def _run(trainer: MaxEntGRPOTrainer, config: MaxEntGRPOConfig) -> None:
    """Train and save the final model, turning the ways a run can end badly into one-line errors."""
    from maxent_grpo.training.checkpoints.save_errors import WRITE_ERRORS, SaveError, save_error
    from maxent_grpo.training.empty_batches import NoUsableGenerationError
    from maxent_grpo.training.generation.contract.protocol import GenerationStopped
    from maxent_grpo.training.reward_contract import RewardContractError
    from maxent_grpo.training.reward_scoring.errors import RewardFunctionError, RewardFunctionGone

    try:
        trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    except KeyboardInterrupt as error:
        raise Interrupted(interrupted_message(config.output_dir)) from error
    except (NoUsableGenerationError, GenerationStopped, RewardFunctionGone) as error:
        raise TrainingFailed(str(error)) from error
    # The user's reward function is input the run cannot use (a broken return, an error no retry would fix).
    except (RewardContractError, RewardFunctionError) as error:
        raise UsageError(str(error)) from error
    except SaveError as error:
        raise UsageError(str(error)) from error
    try:
        trainer.save_model(config.output_dir)
    except KeyboardInterrupt as error:
        message = interrupted_message(config.output_dir)
        raise Interrupted(f"{message} (the final model in {config.output_dir} was not completely saved)") from error
    except WRITE_ERRORS as error:
        raise UsageError(str(save_error(f"the model in {config.output_dir}", config.output_dir, error))) from error


def end_training(accelerator: Accelerator) -> None:
    """Destroy the process group (``accelerator.end_training``) once the DDP-wrapped model is gone.

    Call it with no reference to the trainer left. gloo's worker threads live as long as the process group, and one
    of them may still be freeing its last work, which takes the GIL. So the group must be destroyed neither at
    interpreter shutdown (a worker asking for the GIL then is unwound through C++ code that may not throw: SIGABRT,
    "terminate called without an active exception", after a successful run) nor by DDP's reducer dropping the last
    reference (it joins the workers holding the GIL: a deadlock). Collected first, the reducer lets go of a group
    still registered; `destroy_process_group` then drops the last reference with the GIL released, and the threads
    are joined before shutdown.
    """
    accelerator.free_memory()  # the accelerator's references to the DDP-wrapped model, optimizer and data loaders
    gc.collect()  # the trainer's reference cycles, and with them the wrapped model and its reducer
    if "vllm" in sys.modules:
        # A colocated vLLM engine keeps process groups of its own on top of the default one, and destroys them when
        # the interpreter exits, after the default group is gone ("Invalid process group specified"): destroy them
        # first, with vLLM's own teardown, which ends with the default group.
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    accelerator.end_training()
