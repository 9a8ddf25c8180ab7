"""Tool-calling episodes through a real `vllm` server: every turn is a token-id prompt the server generates from."""

from __future__ import annotations

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMServerBackend
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tool_tokenizer
from tests.support.guessing_game import FlakyGuessGame, aligned_game_reward, game_dataset
from tests.support.real_vllm_server import running_vllm_server
from tests.support.training import tiny_config

CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": 3}}\n</tool_call>'


def test_every_turn_goes_through_the_server(tmp_path):
    tokenizer = build_tiny_tool_tokenizer([CALL])
    model = build_tiny_model(tokenizer, hidden_size=256, num_layers=2, max_position_embeddings=1024)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    call = tokenizer.convert_tokens_to_ids(CALL)
    sampling = SamplingSettings(max_tokens=2, generation_kwargs={"logit_bias": {str(call): 40.0}})
    with running_vllm_server(tmp_path / "model", max_model_len=1024) as url:
        backend = VLLMServerBackend(url, tokenizer=tokenizer, sampling=sampling, request_timeout=60.0)
        trainer = MaxEntGRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=[aligned_game_reward],
            args=tiny_config(
                tmp_path / "out",
                per_device_train_batch_size=4,
                num_generations=2,
                max_completion_length=160,
                max_tool_calling_iterations=1,
                tool_timeout=5.0,
            ),
            train_dataset=game_dataset(4),
            environment_factory=FlakyGuessGame,
            generation_backend=backend,
        )
        trainer.train()
    logs = [entry for entry in trainer.state.log_history if "tools/call_frequency" in entry]
    assert [entry["tools/call_frequency"] for entry in logs] == [2.0, 2.0]  # two guesses of 3 per episode
    assert [entry["generation/dropped_prompts"] for entry in logs] == [0.0, 0.0]
    assert backend.stats["requests"] >= 8  # a first turn and a tool round per step, each of its own requests
