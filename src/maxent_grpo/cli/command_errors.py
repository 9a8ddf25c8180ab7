"""The ways a command ends other than with a usage error (`usage_error`), each mapped to its exit code by `main`."""


class TrainingFailed(Exception):
    """Training ran and produced nothing usable, or a server stopped (exit code 1); its message is one sentence."""


class Interrupted(Exception):
    """The run was interrupted (Ctrl-C, exit code 130); its message names the checkpoint to resume from."""
