"""The `maxent-grpo` command: `demo`, `train`, `bench`, `config-reference` and `vllm-serve`.

`train` reads a YAML recipe and `--field value` overrides the way TRL's scripts do (see `recipe`). Input that cannot be
used ends the command with one line on stderr and exit code 2, a run whose every generation batch was dropped with one
line and exit code 1, Ctrl-C with one line naming the checkpoint to resume from and exit code 130; anything else is a
bug and keeps its traceback. The heavy modules (torch, transformers, TRL's trainer) are imported by the command that
needs them, so that `maxent-grpo --help` answers at once.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl import ModelConfig

from maxent_grpo.cli.ansi_free_output import strip_ansi_when_redirected
from maxent_grpo.cli.recipe import PROG, parse_train_args
from maxent_grpo.cli.trackio_banner import say_local_trackio_logs_stay_local
from maxent_grpo.cli.usage_error import UsageError, UsageErrorParser

if TYPE_CHECKING:
    from accelerate import Accelerator

    from maxent_grpo.cli.script_args import TrainScriptArguments
    from maxent_grpo.config import MaxEntGRPOConfig
    from maxent_grpo.trainer import MaxEntGRPOTrainer


def _train(argv: Sequence[str]) -> int:
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
    from transformers.trainer_callback import ProgressCallback

    import maxent_grpo.cli.run_checks as run_checks
    import maxent_grpo.cli.script_args as inputs
    from maxent_grpo.cli.checkpoint_checks import check_checkpoint
    from maxent_grpo.cli.data_file_checks import dataset_read_errors
    from maxent_grpo.cli.line_progress import LineProgressCallback, silence_library_progress_bars
    from maxent_grpo.cli.prompt_checks import check_chat_template, check_prompts
    from maxent_grpo.trainer import MaxEntGRPOTrainer
    from maxent_grpo.training.dynamic_sampling import UnknownRewardMetricError
    from maxent_grpo.training.generation.backends.protocol import GenerationStopped

    # Dotted paths (reward functions, a custom maxent_mode_key) resolve from the working directory too, as in TRL's
    # scripts.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    script_args, config, model_args = parse_train_args(argv)
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
    except GenerationStopped as error:  # a vLLM server that has not come up within vllm_server_timeout
        raise TrainingFailed(str(error)) from error
    if chat_prompts:
        check_chat_template(trainer.processing_class, model_args.model_name_or_path)
    run_checks.check_logits_fit(config, trainer.model, trainer.accelerator.device)
    if script_args.ignore_bias_buffers:
        inputs.ignore_bool_buffers(trainer.model)
    if log_file and trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(LineProgressCallback())
    _run(trainer, config)
    trainer.accelerator.print(f"Model saved to {config.output_dir}")
    accelerator = trainer.accelerator
    del trainer  # see `_end_training`
    _end_training(accelerator)
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

    if model_args.model_name_or_path != inputs.TINY_MODEL:
        check_model_source(model_args.model_name_or_path)
    return inputs.load_model(model_args, config)


class TrainingFailed(Exception):
    """Training ran and produced nothing usable (exit code 1); its message is one sentence."""


class Interrupted(Exception):
    """The run was interrupted (Ctrl-C, exit code 130); its message names the checkpoint to resume from."""


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
    from maxent_grpo.training.generation.backends.protocol import GenerationStopped
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


def _end_training(accelerator: Accelerator) -> None:
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


# ----------------------------------------------------------------------------------------------------------- demo
def _demo(argv: Sequence[str]) -> int:
    from maxent_grpo import demo

    parser = UsageErrorParser(
        prog=f"{PROG} demo",
        description="Train stock GRPO and MaxEnt-GRPO side by side on the tiny offline model and the bundled "
        "'pick a vowel:' task (CPU, no download), then show each one's reward and answers.",
    )
    parser.add_argument(
        "--steps", type=int, default=demo.DEFAULT_STEPS, help="training steps of each method (default: %(default)s)"
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="save the trained models in DIR/grpo and DIR/maxent (default: temporary directories, removed after)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the models' initialisation, sampling and training"
    )
    parser.add_argument("--no-trackio", action="store_true", help="do not log the runs with trackio")
    options = parser.parse_args(argv)
    if options.steps < 1:
        raise UsageError(f"--steps {options.steps} is invalid: expected an integer >= 1")
    if options.output_dir is not None:
        from maxent_grpo.cli.run_checks import check_output_dir

        check_output_dir(str(options.output_dir))

    print(
        f"maxent-grpo demo: prompt {demo.VOWEL_PROMPT!r}, reward 1 for an answer that starts with a vowel, so five "
        "answers are equally right. Stock GRPO and MaxEnt listwise (entropy over distinct first letters, "
        f"maxent_mode_key='first_token') train the same tiny offline model from seed {options.seed}, "
        f"{options.steps} steps of {demo.TASK.num_generations} completions each."
    )
    import torch

    torch.set_num_threads(1)  # the model is tiny: more threads only contend (several times slower on 2 cores)
    result = demo.run_demo(options.steps, options.seed, trackio=not options.no_trackio, save_to=options.output_dir)
    print()
    print(demo.format_report(result))
    print()
    print(
        f"Measured on {demo.EVAL_SAMPLES} answers sampled from each model ({result.seconds:.0f} s of training). "
        "Answer entropy: of the first-letter distribution over the five vowels, 1.0 when all five are equally "
        "frequent, 0.0 when one vowel is all that is left."
    )
    if options.output_dir is not None:
        print(f"Trained models saved to {options.output_dir / 'grpo'} and {options.output_dir / 'maxent'}")
    if not options.no_trackio:
        runs = " and ".join(result.run_names[method] for method in demo.METHODS)
        print(f"Compare the runs {runs} with: trackio show --project {demo.TRACKIO_PROJECT}")
    print(
        f"Next, train MaxEnt on this task from a recipe (any field can be changed on the command line): "
        f"{demo.NEXT_COMMAND}"
    )
    return 0


# ------------------------------------------------------------------------------------------- bench, config-reference
def _bench(argv: Sequence[str]) -> int:
    try:
        from maxent_grpo.bench import main as bench_main
    except ModuleNotFoundError as error:
        if error.name != "maxent_grpo.bench":
            raise
        raise UsageError("the benchmark harness (maxent_grpo.bench) is not part of this installation") from error
    return bench_main(list(argv))


def _config_reference(argv: Sequence[str]) -> int:
    import maxent_grpo.cli.config_reference as config_reference

    parser = UsageErrorParser(
        prog=f"{PROG} config-reference",
        description="Print the configuration reference (Markdown), or rewrite the marked block of a Markdown file "
        "(docs/configuration.md in this repository).",
    )
    parser.add_argument("--write", type=Path, metavar="FILE.md", help="replace the block between the markers")
    options = parser.parse_args(argv)
    if options.write is None:
        print(config_reference.render_config_reference())
        return 0
    try:
        changed = config_reference.write_config_reference(options.write)
    except OSError as error:
        raise UsageError(f"cannot update {str(options.write)!r}: {error.strerror or error}") from error
    except ValueError as error:  # the file has no marked block
        raise UsageError(f"cannot update {str(options.write)!r}: {error}") from error
    print(f"{options.write}: configuration reference {'updated' if changed else 'already up to date'}")
    return 0


def _vllm_serve(argv: Sequence[str]) -> int:
    import maxent_grpo.cli.vllm_serve as vllm_serve

    options, vllm_args = vllm_serve.parser(f"{PROG} vllm-serve", UsageErrorParser).parse_known_args(argv)
    code, problem = vllm_serve.run(options, vllm_args)
    if problem is not None:
        raise TrainingFailed(problem)
    return code


COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "demo": (_demo, "train GRPO and MaxEnt side by side on the tiny offline task and compare their answers"),
    "train": (_train, "train from a YAML recipe and/or --field value arguments (TRL style; --help lists them)"),
    "bench": (_bench, "run the benchmark harness (arguments are passed on to it)"),
    "config-reference": (_config_reference, "print or write the configuration reference (docs/configuration.md)"),
    "vllm-serve": (_vllm_serve, "start a vLLM server for server mode, wait until it is ready, print its URL"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `maxent-grpo` console script; returns the exit code."""
    parser = UsageErrorParser(
        prog=PROG,
        description="MaxEnt-GRPO for TRL. Commands:\n"
        + "\n".join(f"  {name:<18}{summary}" for name, (_, summary) in COMMANDS.items()),
        epilog=f"'{PROG} <command> --help' describes a command's arguments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=list(COMMANDS), metavar="command", help="one of the commands above")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    strip_ansi_when_redirected()
    say_local_trackio_logs_stay_local()
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = PROG
    try:
        if not argv:
            raise UsageError(f"expected a command, one of {', '.join(COMMANDS)} ({PROG} --help describes them)")
        options = parser.parse_args(argv)
        prog = f"{PROG} {options.command}"
        run, _ = COMMANDS[options.command]
        return run(options.args)
    except UsageError as error:
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except TrainingFailed as error:
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except Interrupted as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # before training started, or in another command
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing left to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
