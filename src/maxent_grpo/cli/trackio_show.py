"""The ``trackio show`` command that opens a run's dashboard on the figures that matter first.

trackio lays its charts out in the order of the ``TRACKIO_PLOT_ORDER`` variable of the ``trackio show`` process
(comma-separated keys; ``prefix/*`` for a group), else alphabetically: TRL's ``profiling/...`` timings would come
before the reward. `PLOT_ORDER` puts the reward and the policy's entropy first, then the MaxEnt figures and each reward
function's.
"""

from __future__ import annotations

#: The chart order given to trackio (reward and entropy, the MaxEnt figures, each reward function's, generation).
PLOT_ORDER = "reward,entropy,maxent/mode_coverage,maxent/*,rewards/*,generation/*"


def show_command(project: str) -> str:
    """The command that opens ``project``'s dashboard with `PLOT_ORDER`."""
    return f"TRACKIO_PLOT_ORDER='{PLOT_ORDER}' trackio show --project {project}"


def show_command_lines(project: str) -> list[str]:
    """`show_command` as two shell lines (the first ending in a line continuation), each short whatever the project."""
    return [f"TRACKIO_PLOT_ORDER='{PLOT_ORDER}' \\", f"  trackio show --project {project}"]
