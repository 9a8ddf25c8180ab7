"""The listwise objective inside real training: advantages, metrics, reference prior, controllers and resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from maxent_grpo import Completion, MaxEntGRPOTrainer
from maxent_grpo.rewards import vowel_start_reward
from maxent_grpo.training.checkpoints.extra_state import CONTROLLER_STATE_FILE
from tests.support.training import tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


class AdvantageRecorder(MaxEntGRPOTrainer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: list[torch.Tensor] = []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.recorded.append(output["advantages"].clone())
        self.had_old_logps = "old_per_token_logps" in output
        return output


class ScriptedBackend:
    """A backend whose every group is the same scripted completions: slot ``i`` of a group is ``completion(i)``."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def completion(self, slot: int) -> tuple[str, list[int]]:
        raise NotImplementedError

    def generate(self, prompts, counts):
        groups = []
        for prompt, count in zip(prompts, counts, strict=True):
            prompt_ids = self.tokenizer(prompt)["input_ids"]
            group = []
            for slot in range(count):
                text, ids = self.completion(slot)
                group.append(Completion(text=text, prompt_ids=prompt_ids, completion_ids=ids))
            groups.append(group)
        return groups


class TruncatedFirstBackend(ScriptedBackend):
    """Every group is the completions "6" (truncated: no EOS), "2", "7", "1" (each ending in EOS)."""

    def completion(self, slot: int) -> tuple[str, list[int]]:
        text = "6271"[slot % 4]
        return text, self.tokenizer(text)["input_ids"] + ([] if text == "6" else [self.tokenizer.eos_token_id])


class PrefixedVowelBackend(ScriptedBackend):
    """Every group spells two answers with special-token and space prefixes: "a" five ways, "e" three ways."""

    SPELLINGS = ("a", "<bos>a", " a", "<pad><bos> a", "e", "<bos>e", "\ne", "a")

    def completion(self, slot: int) -> tuple[str, list[int]]:
        tokens = self.tokenizer.tokenize(self.SPELLINGS[slot % len(self.SPELLINGS)])
        ids = [*self.tokenizer.convert_tokens_to_ids(tokens), self.tokenizer.eos_token_id]
        return self.tokenizer.decode(ids, skip_special_tokens=True), ids


def _one_listwise_step(tmp_path, model_dir, reward, backend_class, **config) -> AdvantageRecorder:
    """One listwise step of the saved tiny model on the vowel prompt, with completions from ``backend_class``."""
    _, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(tmp_path, max_steps=1, per_device_train_batch_size=8, maxent_objective="listwise", **config)
    trainer = AdvantageRecorder(
        model=str(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=_vowel_data(),
        processing_class=tokenizer,
        generation_backend=backend_class(tokenizer),
    )
    trainer.train()
    return trainer


def _prefixed_vowel_step(tmp_path, model_dir, **config) -> AdvantageRecorder:
    """One listwise step at tau = 0 with `first_token` modes over the spellings of `PrefixedVowelBackend`."""
    return _one_listwise_step(
        tmp_path,
        model_dir,
        vowel_start_reward,
        PrefixedVowelBackend,
        num_generations=8,
        maxent_tau=0.0,
        maxent_tau_final=None,
        maxent_mode_key="first_token",
        **config,
    )


def test_special_token_and_space_prefixes_do_not_make_new_modes(tmp_path, tiny_model_dir):
    trainer = _prefixed_vowel_step(tmp_path, tiny_model_dir)
    assert _history(trainer, "maxent/mode_coverage") == [(1, 2.0)]
    # tau = 0: the two answers share the weight equally, 1/2 over five "a" rows and 1/2 over three "e" rows.
    (advantages,) = trainer.recorded
    expected = torch.tensor([8 * w - 1 for w in [0.1, 0.1, 0.1, 0.1, 1 / 6, 1 / 6, 1 / 6, 0.1]])
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=0)


def digit_reward(completions, **kwargs):
    return [float(completion) for completion in completions]


def _vowel_data(n: int = 64) -> Dataset:
    return Dataset.from_dict({"prompt": ["pick a vowel:"] * n})


def _history(trainer, key):
    return [(e["step"], e[key]) for e in trainer.state.log_history if key in e]


def test_listwise_advantages_replace_grpo_and_are_logged(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        tmp_path,
        max_steps=3,
        per_device_train_batch_size=8,
        num_generations=8,
        maxent_objective="listwise",
        maxent_tau=0.5,
        maxent_tau_final=None,
        maxent_mode_key="first_token",
        maxent_mode_coverage_threshold=1.0,
    )
    trainer = AdvantageRecorder(
        model=model,
        reward_funcs=vowel_start_reward,
        args=args,
        train_dataset=_vowel_data(),
        processing_class=tokenizer,
    )
    trainer.train()
    assert len(trainer.recorded) == 3
    for advantages in trainer.recorded:
        assert torch.isfinite(advantages).all()
        assert advantages.sum().abs().item() < 1e-4  # one group per batch: zero-mean
    for key in ("maxent/tau", "maxent/beta", "maxent/weight_entropy", "maxent/mode_coverage"):
        assert len(_history(trainer, key)) == 3, key
    assert all(value == 0.5 for _, value in _history(trainer, "maxent/tau"))  # no target: tau is fixed
    assert all(value >= 0 for _, value in _history(trainer, "maxent/mode_coverage"))


def test_tau_anneals_from_maxent_tau_to_maxent_tau_final(tmp_path, tiny_model_dir):
    _, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        tmp_path,
        max_steps=4,
        per_device_train_batch_size=8,
        num_generations=8,
        maxent_objective="listwise",
        maxent_tau=1.0,
        maxent_tau_final=0.0625,
        maxent_tau_anneal_fraction=0.5,
        maxent_mode_key="first_token",
    )
    trainer = MaxEntGRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=vowel_start_reward,
        args=args,
        train_dataset=_vowel_data(),
        processing_class=tokenizer,
    )
    trainer.train()
    # Step s generates after s - 1 finished steps: tau = (1/16) ** ((s - 1) / 2) over 0.5 * 4 steps, then held.
    assert [tau for _, tau in _history(trainer, "maxent/tau")] == pytest.approx([1.0, 0.25, 0.0625, 0.0625])


def test_controllers_continue_after_resume(tmp_path, tiny_model_dir):
    _, tokenizer = tiny_model_and_tokenizer()

    def make(output_dir, max_steps):
        args = tiny_config(
            output_dir,
            max_steps=max_steps,
            per_device_train_batch_size=8,
            num_generations=8,
            maxent_objective="listwise",
            maxent_tau=1.0,
            maxent_tau_final=None,
            maxent_target_weight_entropy=0.5,
            maxent_tau_lr=0.5,
            beta=0.05,
            kl_target=1e-4,
            kl_horizon=10,
            save_strategy="steps",
            save_steps=2,
        )
        return MaxEntGRPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=vowel_start_reward,
            args=args,
            train_dataset=_vowel_data(),
            processing_class=tokenizer,
        )

    full = make(tmp_path / "full", 4)
    full.train()
    taus = dict(_history(full, "maxent/tau"))
    betas = dict(_history(full, "maxent/beta"))
    assert len(set(taus.values())) > 1, "the tau controller never moved"
    assert len(set(betas.values())) > 1, "the beta controller never moved"

    saved = json.loads((tmp_path / "full" / "checkpoint-2" / CONTROLLER_STATE_FILE).read_text())
    resumed = make(tmp_path / "full", 4)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    # The resumed history starts with the checkpoint's own log history (steps 1-2).
    resumed_taus = dict(_history(resumed, "maxent/tau"))
    resumed_betas = dict(_history(resumed, "maxent/beta"))
    assert {step: taus[step] for step in (1, 2)} == {step: resumed_taus[step] for step in (1, 2)}
    assert sorted(resumed_taus) == [1, 2, 3, 4]
    # Step 3 starts from the controller state saved at step 2, exactly as in the uninterrupted run.
    assert resumed_taus[3] == pytest.approx(saved["tau"]["tau"]) == pytest.approx(taus[3])
    assert resumed_betas[3] == pytest.approx(saved["trainer_beta"]) == pytest.approx(betas[3])
    assert all(math.isfinite(v) for v in [*resumed_taus.values(), *resumed_betas.values()])


def test_masked_truncated_completions_are_no_candidates(tmp_path, tiny_model_dir):
    trainer = _one_listwise_step(
        tmp_path,
        tiny_model_dir,
        digit_reward,
        TruncatedFirstBackend,
        num_generations=4,
        maxent_tau=0.1,
        beta=0.5,
        mask_truncated_completions=True,
    )
    (advantages,) = trainer.recorded
    groups = advantages.view(-1, 4)
    # The truncated completion (reward 6) trains nothing and takes no weight; the reward-7 completion leads.
    assert (groups[:, 0] == 0).all()
    assert (groups[:, 2] > 1.5).all() and (groups[:, [1, 3]] < 0).all()
    assert groups.sum(dim=1).abs().max().item() < 1e-4


def _completion_logp(model, prompt_ids: list[int], completion_ids: list[int]) -> float:
    """log pi(completion | prompt) at temperature 1, from the model's own forward pass."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    start = len(prompt_ids)
    return sum(logps[start - 1 + i, token].item() for i, token in enumerate(completion_ids))


@pytest.mark.parametrize("steps_per_generation", [1, 2])
def test_policy_mode_probability_weighs_modes_by_their_sampled_completions(
    tmp_path, tiny_model_dir, steps_per_generation
):
    # steps_per_generation=2: two groups per generation batch, and TRL computes old_per_token_logps (the batch is
    # trained over two micro-steps), which the estimate then uses instead of its own forward.
    trainer = _prefixed_vowel_step(
        tmp_path,
        tiny_model_dir,
        maxent_mode_probability="policy",
        # Untruncated: the untrained model's factors are far above the default clip (pinned in the unit tests).
        maxent_mode_correction_clip=1e9,
        bf16=False,
        steps_per_generation=steps_per_generation,
    )
    (advantages,) = trainer.recorded
    assert trainer.had_old_logps is (steps_per_generation == 2)
    # Expected from the saved (untrained) model: p_m sums the probabilities of the mode's distinct completions
    # ("a" is spelled five times, four of them distinct; "e" three times), and tau = 0 gives (5):
    # W_m ∝ n_m / p_m, w_i = W_m / n_m.
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tokenizer = trainer.processing_class
    prompt_ids = tokenizer("pick a vowel:")["input_ids"]
    backend = PrefixedVowelBackend(tokenizer)
    (group,) = backend.generate(["pick a vowel:"], [8])
    distinct = {tuple(c.completion_ids): c.text.strip() for c in group}
    p = {"a": 0.0, "e": 0.0}
    for ids, answer in distinct.items():
        p[answer] += math.exp(_completion_logp(model, prompt_ids, list(ids)))
    n = {"a": 5, "e": 3}
    weight = {m: n[m] / p[m] for m in p}
    total = sum(weight.values())
    expected = [8 * weight[c.text.strip()] / total / n[c.text.strip()] - 1 for c in group] * steps_per_generation
    torch.testing.assert_close(advantages, torch.tensor(expected, dtype=advantages.dtype), atol=1e-4, rtol=1e-4)
    assert len(distinct) == 7
    count_form = [8 * 0.5 / n[c.text.strip()] - 1 for c in group] * steps_per_generation
    count_form = torch.tensor(count_form, dtype=advantages.dtype)
    assert (advantages - count_form).abs().max().item() > 0.05  # the correction moved the weights
