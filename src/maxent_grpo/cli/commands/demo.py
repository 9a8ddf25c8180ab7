"""`maxent-grpo demo`: stock GRPO and MaxEnt-GRPO trained side by side on the tiny offline model, then compared."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from maxent_grpo.cli.trackio_show import show_command
from maxent_grpo.cli.usage_error import PROG, UsageError, UsageErrorParser


def run(argv: Sequence[str]) -> int:
    """``maxent-grpo demo [--steps N] [--output-dir DIR] [--seed S] [--no-trackio]``."""
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
        print(f"Compare the runs {runs} with: {show_command(demo.TRACKIO_PROJECT)}")
    print(
        f"Next, train MaxEnt on this task from a recipe (any field can be changed on the command line): "
        f"{demo.NEXT_COMMAND}"
    )
    return 0
