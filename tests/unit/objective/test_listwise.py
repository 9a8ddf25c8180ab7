"""`ListwiseObjective` on a typed rollout batch: which rows are candidates, and what the beta controller keeps."""

from __future__ import annotations

import pytest
import torch

from maxent_grpo.collectives import Collectives
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.objective.controllers import BetaController, TauController
from maxent_grpo.objective.listwise import ListwiseObjective, RolloutBatch

GROUP_SIZE = 4


#: Process 1 of two processes that hold identical rows: a gather stacks the local values twice.
MIRRORED = Collectives(
    process_index=1,
    device=torch.device("cpu"),
    gather=lambda tensor: torch.cat([tensor, tensor]),
    gather_object=lambda values: [*values, *values],
)


def _objective(*, tau: float, beta: float, kl_target: float | None = None) -> ListwiseObjective:
    return ListwiseObjective(
        TauController(tau, None, lr=0.05, tau_min=1e-3, tau_max=100.0, warmup_steps=0),
        BetaController(beta, kl_target, horizon=10),
        q_temperature=1.0,
        q_epsilon=0.0,
        length_normalize_ref=True,
        mode_key=None,
        coverage_threshold=1.0,
    )


def _batch(rewards: list[float], beta: float, output: dict[str, torch.Tensor]) -> RolloutBatch:
    """A training batch of one local group of ``rewards`` (mirrored globally) with ``output``'s masks."""
    mask = output["completion_mask"] * output.get("tool_mask", 1)
    return RolloutBatch(
        rewards_per_func=torch.tensor(rewards * 2).unsqueeze(1),
        reward_weights=torch.ones(1),
        row_keep=None,
        completion_mask=mask,
        completion_ids=torch.ones_like(mask),
        texts=["x"] * len(rewards),
        ref_per_token_logps=output.get("ref_per_token_logps"),
        group_size=GROUP_SIZE,
        beta=beta,
        training=True,
        global_step=0,
        max_steps=10,
    )


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_a_row_without_unmasked_tokens_is_no_candidate(beta: float) -> None:
    # Row 0 was truncated and `mask_truncated_completions` zeroed its mask: its length-normalised reference term
    # would be 0 (the best value) while every real completion has -4.5.
    completion_mask = torch.tensor([[0, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]])
    output = {"completion_mask": completion_mask, "ref_per_token_logps": torch.full((4, 3), -4.5)}
    if beta == 0:
        del output["ref_per_token_logps"]  # TRL computes no reference log-probs without beta
    tau = 0.1

    step = _objective(tau=tau, beta=beta).step(_batch([6.0, 2.0, 7.0, 1.0], beta, output), MIRRORED)
    advantages = step.advantages

    # The three real candidates share one reference term, so it cancels: w = softmax(r / (tau + beta)).
    weights = torch.softmax(torch.tensor([2.0, 7.0, 1.0]) / (tau + beta), dim=0)
    expected = torch.cat([torch.zeros(1), 3 * weights - 1])
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=0)
    assert advantages[2] > 1.9  # the best real completion is pushed up, not down


def test_tool_mask_counts_towards_the_unmasked_tokens() -> None:
    output = {
        "completion_mask": torch.ones(4, 2, dtype=torch.long),
        "tool_mask": torch.tensor([[1, 1], [0, 0], [1, 0], [1, 1]]),
    }
    advantages = _objective(tau=1.0, beta=0.0).step(_batch([1.0, 9.0, 0.0, 2.0], 0.0, output), MIRRORED).advantages
    assert advantages[1] == 0
    assert advantages[[0, 2, 3]].abs().min() > 0
    assert abs(advantages.sum().item()) < 1e-5


def test_kl_values_are_kept_only_for_the_beta_controller() -> None:
    output = {"completion_mask": torch.ones(4, 2, dtype=torch.long), "ref_per_token_logps": torch.zeros(4, 2)}
    fixed = _objective(tau=1.0, beta=0.1)
    for _ in range(1000):
        fixed.observe_kl(0.3)
    assert fixed._kl_values == []

    adaptive = _objective(tau=1.0, beta=0.1, kl_target=0.1)
    for _ in range(3):
        adaptive.observe_kl(0.3)
    step = adaptive.step(_batch([1.0, 2.0, 3.0, 4.0], 0.1, output), MIRRORED)
    assert adaptive._kl_values == []
    assert step.beta > 0.1  # the measured KL was above target
    assert step.metrics["maxent/beta"] == 0.1  # the batch was scored with the beta it had


@pytest.mark.parametrize(
    ("settings", "warns"),
    [
        ({"maxent_tau": 0.25, "maxent_tau_final": None}, True),
        ({"maxent_tau": 0.05, "maxent_tau_final": None}, False),
        ({"maxent_tau": 0.25}, False),  # the default anneal to 0.003
        ({"maxent_tau": 0.25, "maxent_mode_probability": "count"}, False),
    ],
)
def test_policy_mode_probability_with_a_fixed_tau_warns(tmp_path, caplog, tiny_tokenizer, settings, warns) -> None:
    fields = {"maxent_objective": "listwise", "maxent_mode_key": "last_line", "maxent_mode_probability": "policy"}
    args = MaxEntGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{**fields, **settings})
    with caplog.at_level("WARNING", logger="maxent_grpo.objective.listwise"):
        ListwiseObjective.from_config(args, tokenizer=tiny_tokenizer)
    assert ("anneal tau to near 0" in caplog.text) is warns


def test_pass_at_k_and_positive_scale_reshape_the_listwise_advantages() -> None:
    # One group of 4 mirrored into two (8 rows, 2 groups of 4): rewards [1, 0, 0, 0] twice, tau = 0: the listwise
    # advantages are [3, -1, -1, -1]; k = 2 weighs both groups alike (C(3, 1) / C(3, 1) = 1), so only the positive
    # scale shows.
    output = {"completion_mask": torch.ones(4, 2, dtype=torch.long)}
    objective = _objective(tau=0.0, beta=0.0)
    objective.pass_at_k, objective.positive_scale = 2, 0.5
    step = objective.step(_batch([1.0, 0.0, 0.0, 0.0], 0.0, output), MIRRORED)
    torch.testing.assert_close(step.advantages, torch.tensor([1.5, -1.0, -1.0, -1.0]), atol=1e-6, rtol=0)


def test_pass_at_k_weighs_a_rarely_solved_group_above_a_often_solved_one() -> None:
    # Two local groups (no mirroring): one success in 4 and three in 4, tau = 0, k = 2. Raw weights C(3, 1) / C(3, 1)
    # = 1 and C(1, 1) / C(3, 1) = 1/3, renormalised to mean 1: 1.5 and 0.5. Listwise advantages: [3, -1, -1, -1] and
    # [1/3, 1/3, 1/3, -1].
    single = Collectives(
        process_index=0, device=torch.device("cpu"), gather=lambda x: x, gather_object=lambda values: list(values)
    )
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    mask = torch.ones(8, 2, dtype=torch.long)
    batch = RolloutBatch(
        rewards_per_func=torch.tensor(rewards).unsqueeze(1),
        reward_weights=torch.ones(1),
        row_keep=None,
        completion_mask=mask,
        completion_ids=torch.ones_like(mask),
        texts=["x"] * 8,
        ref_per_token_logps=None,
        group_size=GROUP_SIZE,
        beta=0.0,
        training=True,
        global_step=0,
        max_steps=10,
    )
    objective = _objective(tau=0.0, beta=0.0)
    objective.pass_at_k = 2
    advantages = objective.step(batch, single).advantages
    expected = torch.tensor([4.5, -1.5, -1.5, -1.5, 1 / 6, 1 / 6, 1 / 6, -0.5])
    torch.testing.assert_close(advantages, expected, atol=1e-6, rtol=0)


def test_config_fields_reach_the_objective(tmp_path, tiny_tokenizer) -> None:
    fields = {
        "output_dir": str(tmp_path),
        "maxent_objective": "listwise",
        "maxent_mode_key": "last_line",
        "maxent_mode_probability": "policy",
        "maxent_pass_at_k": 4,
        "maxent_positive_scale": 0.3,
        "num_generations": 8,
        "per_device_train_batch_size": 8,
        "report_to": "none",
        "use_cpu": True,
    }
    objective = ListwiseObjective.from_config(MaxEntGRPOConfig(**fields), tiny_tokenizer)
    # The truncation defaults to the group size.
    assert (objective.correction_clip, objective.pass_at_k, objective.positive_scale) == (8.0, 4, 0.3)
    clipped = MaxEntGRPOConfig(**fields, maxent_mode_correction_clip=2.5)
    assert ListwiseObjective.from_config(clipped, tiny_tokenizer).correction_clip == 2.5
