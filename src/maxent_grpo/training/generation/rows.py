"""Map a process's rows to prompt groups and back: which rows form one request, and the rows TRL receives.

TRL's `RepeatSampler` lays the global generation batch out as G consecutive rows per prompt, and the dataloader hands
process p the rows ``[p*B, (p+1)*B)``. So global row ``p*B + i`` belongs to group ``(p*B + i) // G``, and a group may
straddle two (or more) processes. Each process asks its backend once per *run*: its consecutive rows of one group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from maxent_grpo.training.generation.contract.episode_trace import EpisodeTrace
from maxent_grpo.training.generation.contract.protocol import Completion


def local_runs(num_rows: int, row_offset: int, group_size: int) -> list[range]:
    """Split local rows ``0..num_rows-1`` into runs of rows that belong to the same global group.

    ``row_offset`` is the global index of local row 0 (``process_index * num_rows``).
    """
    if group_size < 1:
        raise ValueError(f"group_size={group_size!r} is invalid: expected an integer >= 1.")
    runs = []
    start = 0
    while start < num_rows:
        group_end = ((row_offset + start) // group_size + 1) * group_size - row_offset
        stop = min(group_end, num_rows)
        runs.append(range(start, stop))
        start = stop
    return runs


@dataclass
class GeneratedRows:
    """Per-row generation output in TRL 1.16's `_generate` layout (B = local rows).

    Attributes:
        prompt_ids: ids the backend conditioned on, [B][P_i].
        completion_ids: sampled ids, [B][C_i]; a dropped row holds a one-token placeholder.
        texts: decoded completions, [B]; "" for dropped rows.
        logprobs: sampler log-probs [B][C_i], or None when any kept row lacks them.
        keep: whether the row is data, [B]; False rows never reach rewards or the loss.
        tool_masks: per row, its completion's `Completion.tool_mask` ([C_i], 0 on tool-result tokens) or None, [B].
        episodes: per row, its `EpisodeTrace` (a tool-calling episode) or None, [B]; None for dropped rows.
        weight_versions: per row, the weight version its completion was sampled from (`Completion.weight_version`),
            [B]; None for dropped rows and where the backend does not know it.
        extra_fields: per row, its completion's `Completion.extra_fields` (a ``rollout_func``'s other keys) or None,
            [B]; None for dropped rows.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    texts: list[str]
    logprobs: list[list[float]] | None
    keep: list[bool]
    tool_masks: list[list[int] | None]
    episodes: list[EpisodeTrace | None]
    weight_versions: list[str | None]
    extra_fields: list[dict[str, Any] | None]

    def reward_fields(self) -> dict[str, list[Any]]:
        """TRL's ``extra_fields``: per key any row's `extra_fields` hold, its value in every row (None in rows
        without it, dropped ones included), [B] each."""
        keys = dict.fromkeys(key for fields in self.extra_fields if fields for key in fields)
        return {key: [None if fields is None else fields.get(key) for fields in self.extra_fields] for key in keys}

    def tool_mask(self) -> list[list[int]] | None:
        """TRL's ``tool_mask``, [B][C_i]: a kept row's own mask (tool-result tokens 0, all ones when it has none), a
        dropped row all zeros; None when every row is kept and none has a mask. Rows of dropped groups thus reach
        TRL's loss masked out, and are then cut out of it (`training.kept_rows`)."""
        if all(self.keep) and all(mask is None for mask in self.tool_masks):
            return None
        return [
            ([1] * len(ids) if mask is None else list(mask)) if kept else [0] * len(ids)
            for kept, ids, mask in zip(self.keep, self.completion_ids, self.tool_masks, strict=True)
        ]


def assemble_rows(
    runs: Sequence[range],
    groups: Sequence[Sequence[Completion]],
    keep: Sequence[bool],
    *,
    placeholder_prompt_id: int,
    placeholder_completion_id: int,
) -> GeneratedRows:
    """Lay the runs' completions out row by row; rows with ``keep[i] = False`` get placeholders.

    A kept row's run must hold one completion per row (the caller only keeps complete groups). The k-th row of a run
    receives the run's k-th completion, so every row's ids, text and log-probs come from its own prompt's group.
    """
    num_rows = sum(len(run) for run in runs)
    if len(keep) != num_rows:
        raise ValueError(f"keep has {len(keep)} entries for {num_rows} rows.")
    prompt_ids: list[list[int]] = []
    completion_ids: list[list[int]] = []
    texts: list[str] = []
    logprobs: list[list[float] | None] = []
    tool_masks: list[list[int] | None] = []
    episodes: list[EpisodeTrace | None] = []
    weight_versions: list[str | None] = []
    extra_fields: list[dict[str, Any] | None] = []
    for run, group in zip(runs, groups, strict=True):
        fallback_prompt = list(group[0].prompt_ids) if group else [placeholder_prompt_id]
        for position, row in enumerate(run):
            if keep[row]:
                if position >= len(group):
                    raise ValueError(f"Row {row} is kept but its group holds only {len(group)} completions.")
                completion = group[position]
                prompt_ids.append(list(completion.prompt_ids))
                completion_ids.append(list(completion.completion_ids))
                texts.append(completion.text)
                logprobs.append(None if completion.logprobs is None else list(completion.logprobs))
                tool_masks.append(None if completion.tool_mask is None else list(completion.tool_mask))
                episodes.append(completion.episode)
                weight_versions.append(completion.weight_version)
                extra_fields.append(completion.extra_fields)
            else:
                prompt_ids.append(fallback_prompt)
                completion_ids.append([placeholder_completion_id])
                texts.append("")
                logprobs.append([0.0])
                tool_masks.append(None)
                episodes.append(None)
                weight_versions.append(None)
                extra_fields.append(None)
    kept_logprobs = [lp for lp, k in zip(logprobs, keep, strict=True) if k]
    all_logprobs = None if any(lp is None for lp in kept_logprobs) else logprobs
    return GeneratedRows(
        prompt_ids,
        completion_ids,
        texts,
        all_logprobs,
        list(keep),
        tool_masks,
        episodes,  # type: ignore[arg-type]
        weight_versions,
        extra_fields,
    )
