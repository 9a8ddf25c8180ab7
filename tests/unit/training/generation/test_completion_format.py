"""`format_completions` builds exactly the completions stock TRL 1.16 hands its reward functions."""

from __future__ import annotations

import pytest
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.training.generation import completion_format
from maxent_grpo.training.generation.completion_format import format_completions
from tests.support.chat import chat_dataset, reasoning_tokenizer
from tests.support.training import tiny_config

COMPLETIONS = [
    "<think>\nShort.\n</think>\n\nReadability counts.<eos>",
    "Plan first.</think>\n\nThen act.<eos>",
    "no tags, cut off mid",
    "Simple is better.<eos>",
    "<think>\nDone.\n</think>\n\nFlat is better.<|im_end|><eos>",
]


def _stock_completions(tokenizer, prompts, completion_ids, tmp_path):
    """Run stock `GRPOTrainer._generate` on ``prompts`` with its sampler replaced by ``completion_ids``."""
    stock = GRPOTrainer(
        model=build_tiny_model(tokenizer),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=tiny_config(tmp_path, GRPOConfig),
        train_dataset=chat_dataset(),
        processing_class=tokenizer,
    )
    stock._generate_single_turn = lambda *args, **kwargs: (completion_ids, None)
    prompt_ids, _, _, completions, *_ = stock._generate(prompts)
    return prompt_ids, completions


@pytest.mark.parametrize("template", ["qwen3", "qwen3_5_think"])
def test_chat_completions_are_parsed_like_stock_trl(tmp_path, template):
    tokenizer = reasoning_tokenizer(template)
    prompts = [row["prompt"] for row in chat_dataset(len(COMPLETIONS))]
    completion_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in COMPLETIONS]
    prompt_ids, expected = _stock_completions(tokenizer, prompts, completion_ids, tmp_path)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)

    ours = format_completions(tokenizer, prompts, prompt_ids, completion_ids, texts, [True] * len(prompts))

    assert ours == expected
    if template == "qwen3":  # the generation prompt is "<|im_start|>assistant\n": the model opens <think> itself
        assert ours[0] == [{"role": "assistant", "reasoning_content": "Short.", "content": "Readability counts."}]
    else:  # the generation prompt already opened "<think>\n": text before "</think>" is reasoning
        assert ours[1] == [{"role": "assistant", "reasoning_content": "Plan first.", "content": "Then act."}]


def test_chat_completions_without_a_parser_are_assistant_messages_of_the_text():
    tokenizer = build_tiny_tokenizer()
    prompts = [[{"role": "user", "content": "hi"}]] * 2
    ids = [tokenizer("a<eos>", add_special_tokens=False)["input_ids"], [tokenizer.pad_token_id]]
    completions = format_completions(tokenizer, prompts, [[5], [5]], ids, ["a", "ignored"], [True, False])
    assert completions == [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": ""}]]


def test_text_prompts_get_the_texts_and_dropped_rows_nothing():
    tokenizer = reasoning_tokenizer("qwen3")  # a parser is only used for conversational prompts, as in TRL
    completions = format_completions(tokenizer, ["p0:", "p1:"], [[5], [6]], [[7], [8]], ["x", "y"], [True, False])
    assert completions == ["x", ""]


def test_dropped_rows_are_never_parsed(monkeypatch):
    tokenizer = reasoning_tokenizer("qwen3_5_think")
    parsed_ids = []
    parse = completion_format.parse_response

    def recording_parse(tokenizer, ids, prefix):
        parsed_ids.append(ids)
        return parse(tokenizer, ids, prefix=prefix)

    monkeypatch.setattr(completion_format, "parse_response", recording_parse)
    prompts = [row["prompt"] for row in chat_dataset(2)]
    prompt_ids = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, return_dict=True)
    kept_ids = tokenizer("Why.</think>Because.<eos>", add_special_tokens=False)["input_ids"]
    placeholder = [tokenizer.eos_token_id]
    completions = format_completions(
        tokenizer,
        prompts,
        prompt_ids["input_ids"],
        [placeholder, kept_ids],
        ["", "Why.</think>Because."],
        [False, True],
    )
    assert parsed_ids == [kept_ids]
    assert completions == [
        [{"role": "assistant", "content": ""}],
        [{"role": "assistant", "reasoning_content": "Why.", "content": "Because."}],
    ]


def test_an_episode_row_gets_its_own_messages():
    tokenizer = reasoning_tokenizer("qwen3")
    prompts = [[{"role": "user", "content": "hi"}]] * 3
    turns = [{"role": "assistant", "content": ""}, {"role": "tool", "name": "f", "content": "1"}]
    completions = format_completions(
        tokenizer, prompts, [[5]] * 3, [[7]] * 3, ["a", "b", ""], [True, True, False], [turns, None, None]
    )
    assert completions == [turns, [{"role": "assistant", "content": "b"}], [{"role": "assistant", "content": ""}]]
