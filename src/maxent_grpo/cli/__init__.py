"""The `maxent-grpo` command line (`main`, one module per subcommand in `commands`), its `train` arguments
(`recipe`, `script_args`) and every input check.

Input that cannot be used is one `UsageError` (one line, exit code 2) raised by the check that found it: data files
(`data_file_checks`), prompts and chat templates (`prompt_checks`), model and data sources (`hub_access`), reward
functions (`reward_loading`), the output folder and checkpoints (`run_checks`).
"""

from maxent_grpo.cli.main import main

__all__ = ["main"]
