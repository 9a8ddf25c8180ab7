"""The HF backend on a real tokenizer: `_generate_and_score_completions` gives stock TRL 1.16's ids and masks.

SmolLM2's chat template adds a system prompt, and its ``pad`` token is its ``eos`` (``<|im_end|>``): the ids each
side tokenized and generated, and the masks TRL derives from them (a completion that ends at ``<|im_end|>`` keeps
that token and masks what follows), must be equal row by row for chat, plain and own-system-message prompts, greedy
and sampled from the same seed.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer

G = 4
COMPARED = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
PROMPTS = {
    "chat": [[{"role": "user", "content": "What is 7 + 5?"}], [{"role": "user", "content": "Name a prime."}]],
    "own system message": [
        [{"role": "system", "content": "Answer with one number."}, {"role": "user", "content": "What is 3 x 4?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
    ],
    "plain": ["The capital of France is", "7 + 5 ="],
}
SAMPLING = {"greedy": {"do_sample": False}, "sampled": {}}


def no_reward(completions, **kwargs):
    return [0.0] * len(completions)


def _trainer(trainer_class, config_class, model_dir, output_dir, generation_kwargs):
    args = config_class(
        output_dir=str(output_dir),
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=16,
        temperature=1.0,
        generation_kwargs=generation_kwargs or None,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dataset = Dataset.from_dict({"prompt": PROMPTS["plain"]})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return trainer_class(
        model=model, reward_funcs=no_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )


@pytest.fixture(scope="module", params=list(SAMPLING))
def trainers(request, real_model_dir, tmp_path_factory):
    kwargs = SAMPLING[request.param]
    stock = _trainer(GRPOTrainer, GRPOConfig, real_model_dir, tmp_path_factory.mktemp("stock"), kwargs)
    ours = _trainer(MaxEntGRPOTrainer, MaxEntGRPOConfig, real_model_dir, tmp_path_factory.mktemp("ours"), kwargs)
    return stock, ours


def _generated(trainer, prompts):
    set_seed(7)
    inputs = [{"prompt": prompt} for prompt in prompts for _ in range(G)]
    trainer.model.eval()
    return trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("form", list(PROMPTS))
def test_ids_and_masks_equal_stock_trl(trainers, form):
    stock, ours = trainers
    expected = _generated(stock, PROMPTS[form])
    got = _generated(ours, PROMPTS[form])
    for key in COMPARED:
        assert torch.equal(got[key], expected[key]), key
    tokenizer = ours.processing_class
    im_start, im_end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    for ids, mask in zip(got["prompt_ids"], got["prompt_mask"], strict=True):
        prompt = ids[mask.bool()].tolist()
        assert prompt[:2] != [im_start, im_start]  # no doubled BOS / <|im_start|>
        if form != "plain":
            assert prompt.count(im_start) == 3  # system, user, assistant: the template applied once
            assert tokenizer.decode(prompt).count("<|im_start|>assistant") == 1
    ended = 0
    for ids, mask in zip(got["completion_ids"], got["completion_mask"], strict=True):
        ids, mask = ids.tolist(), mask.tolist()
        if im_end in ids:  # kept up to and including the first <|im_end|>, masked after it
            first = ids.index(im_end)
            assert mask[: first + 1] == [1] * (first + 1) and not any(mask[first + 1 :])
            ended += 1
        else:
            assert all(mask)
    print(f"{form}: {ended} of {len(got['completion_ids'])} completions ended at <|im_end|>")
