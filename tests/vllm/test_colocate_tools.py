"""Tool-calling episodes on the real colocated vLLM engine: every turn is a `TokenPrompt` the engine generates from."""

from __future__ import annotations

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tool_tokenizer
from tests.support.guessing_game import FlakyGuessGame, aligned_game_reward, game_dataset
from tests.support.training import tiny_config

CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": 3}}\n</tool_call>'


def test_every_turn_goes_through_the_engine(tmp_path):
    tokenizer = build_tiny_tool_tokenizer([CALL])
    model = build_tiny_model(tokenizer, hidden_size=256, num_layers=2, max_position_embeddings=1024)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    call = tokenizer.convert_tokens_to_ids(CALL)
    args = tiny_config(
        tmp_path / "out",
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=160,
        max_tool_calling_iterations=1,
        bf16=False,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=1024,
        generation_kwargs={"max_tokens": 2, "logit_bias": {call: 40.0}},  # each turn: two guesses of 3
        tool_timeout=5.0,
    )
    trainer = MaxEntGRPOTrainer(
        model=str(tmp_path / "model"),
        processing_class=tokenizer,
        reward_funcs=[aligned_game_reward],
        args=args,
        train_dataset=game_dataset(4),
        environment_factory=FlakyGuessGame,
    )
    generated = []
    generate = trainer._generate

    def recording(prompts):
        generated.append(generate(prompts))
        return generated[-1]

    trainer._generate = recording
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert [entry["tools/call_frequency"] for entry in logs] == [2.0, 2.0]
    for _, completion_ids, tool_mask, completions, logprobs, *_ in generated:
        for ids, mask, messages, row_logprobs in zip(completion_ids, tool_mask, completions, logprobs, strict=True):
            assert ids[:2] == [call, call] and mask[:2] == [1, 1] and 0 in mask
            assert ids[-2:] == [call, call] and mask[-2:] == [1, 1]  # the second turn, sampled by the engine
            assert [message["role"] for message in messages] == ["assistant", "tool", "tool", "assistant"]
            assert all(lp == 0.0 for lp, m in zip(row_logprobs, mask, strict=True) if not m)
