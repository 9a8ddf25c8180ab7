"""Tool-calling episodes through a real `vllm` server: every turn is a token-id prompt the server generates from.

The server is the session's (`shared_server`): its model's vocabulary holds the tool tokenizer's phrase tokens under
the same ids (`tests/vllm/conftest.py`), and the trainer pushes its own weights before the first generation.
"""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoTokenizer

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMServerBackend
from maxent_grpo.tiny_model import build_tiny_tool_tokenizer
from tests.support.guessing_game import GUESS_THREE, FlakyGuessGame, aligned_game_reward, game_dataset
from tests.support.training import tiny_config
from tests.vllm.conftest import SERVER_TOOL_PHRASES


def test_every_turn_goes_through_the_server(tmp_path, vllm_model_dir, server_url):
    tokenizer = build_tiny_tool_tokenizer([GUESS_THREE])
    served = AutoTokenizer.from_pretrained(vllm_model_dir)
    call = tokenizer.convert_tokens_to_ids(GUESS_THREE)
    assert [served.convert_tokens_to_ids(t) for t in SERVER_TOOL_PHRASES] == [call - 1, call]
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir)
    assert model.config.vocab_size == len(tokenizer)
    sampling = SamplingSettings(max_tokens=2, generation_kwargs={"logit_bias": {str(call): 40.0}})
    backend = VLLMServerBackend(
        server_url,
        tokenizer=tokenizer,
        sampling=sampling,
        request_timeout=60.0,
        weights_directory=tmp_path / "weights",
    )
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
    assert backend.stats["weight_pushes"] >= 1  # it generated from the trainer's weights, not the launch ones
