"""The tool metrics of one generation step: TRL's ``tools/call_frequency`` and ``tools/failure_frequency`` over the
rows that train, and the episodes that failed (and were retried or dropped), by cause."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.generation.episodes.failure import FailureCause
from maxent_grpo.training.generation.rows import GeneratedRows


def tool_metrics(
    rows: GeneratedRows, failures: Mapping[FailureCause, int], collectives: Collectives
) -> dict[str, float]:
    """Metrics summed over processes (one gather, on every process).

    ``tools/call_frequency`` is tool calls per kept row and ``tools/failure_frequency`` the share of their calls that
    failed and were fed back (TRL's, on kept rows only; absent when no row is kept). ``tools/failed_episodes`` counts
    episodes lost to a tool or environment fault, ``tools/backend_failed_episodes`` those lost to the backend in one
    of their turns, every attempt counted (retried ones too).
    """
    traces = [trace for trace, kept in zip(rows.episodes, rows.keep, strict=True) if kept and trace is not None]
    local = [len(traces), sum(t.tool_calls for t in traces), sum(t.tool_failures for t in traces)]
    local += [failures["tool"], failures["backend"]]
    summed = collectives.gather(torch.tensor(local, dtype=torch.long, device=collectives.device)).view(-1, 5).sum(0)
    kept, calls, failed_calls, tool_failed, backend_failed = summed.tolist()
    metrics = {"tools/failed_episodes": float(tool_failed), "tools/backend_failed_episodes": float(backend_failed)}
    if kept:
        metrics["tools/call_frequency"] = calls / kept
        metrics["tools/failure_frequency"] = failed_calls / calls if calls else 0.0
    return metrics
