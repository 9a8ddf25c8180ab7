"""Tool-calling training through the backend and the retry / drop path, on the tiny model, offline.

An environment whose tool raises on some calls and hangs on others trains without a hang and without a misaligned
row; tool-result tokens are masked out of the loss; the same works with the transformers backend generating real
tool calls, with standalone sync and async tools, and with several named environments.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from tests.support.guessing_game import (
    CALL,
    END,
    FlakyGuessGame,
    ScriptedGuesser,
    aligned_game_reward,
    game_dataset,
    game_tokenizer,
)
from tests.support.training import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore:You are using 'environment_factory'")


class RecordingTrainer(MaxEntGRPOTrainer):
    """Keeps what each `_generate` returned."""

    def _generate(self, prompts):
        result = super()._generate(prompts)
        self.generated = [*getattr(self, "generated", []), result]
        return result


def _game_trainer(tmp_path, backend=None, tokenizer=None, **overrides):
    tokenizer = tokenizer or game_tokenizer()
    model = build_tiny_model(tokenizer, max_position_embeddings=1024, max_completion_length=16)
    fields = {"per_device_train_batch_size": 8, "num_generations": 2, "max_completion_length": 128}
    args = tiny_config(tmp_path, **{**fields, **overrides})
    return RecordingTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[aligned_game_reward],
        args=args,
        train_dataset=game_dataset(),
        environment_factory=FlakyGuessGame,
        generation_backend=backend,
    )


def _logged(trainer, name):
    return [entry[name] for entry in trainer.state.log_history if name in entry]


def test_flaky_environment_trains_without_hang_or_misaligned_row(tmp_path):
    tokenizer = game_tokenizer()
    backend = ScriptedGuesser(tokenizer)
    trainer = _game_trainer(tmp_path, backend, tokenizer, tool_timeout=0.5, max_steps=3)
    before = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    started = time.monotonic()
    trainer.train()
    assert time.monotonic() - started < 25  # a hanging guess costs its 0.5 s limit, never its 30 s

    assert sum(_logged(trainer, "tools/failed_episodes")) > 0  # the hangs, retried
    assert sum(_logged(trainer, "generation/retried_prompts")) > 0
    assert max(_logged(trainer, "tools/failure_frequency")) > 0  # the raising guess, fed back as {'error': ...}
    assert _logged(trainer, "tools/backend_failed_episodes") == [0.0] * 3
    assert _logged(trainer, "tools/call_frequency") == [1.0] * 3  # every kept episode made one call
    changed = [not torch.equal(before[name], param) for name, param in trainer.model.named_parameters()]
    assert any(changed)

    for _, completion_ids, tool_mask, completions, *_ in trainer.generated:
        for ids, mask, messages in zip(completion_ids, tool_mask, completions, strict=True):
            assert len(mask) == len(ids)
            model_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
            tool_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
            assert model_text.startswith(CALL) and model_text.endswith("done<|im_end|>")
            assert "<tool_response>" in tool_text and "<tool_response>" not in model_text
            tool_message = next(message for message in messages if message["role"] == "tool")
            assert tool_message["content"] in tool_text
            assert "5" not in model_text.removeprefix(CALL)[:1]  # a hanging guess never trains


def test_retry_policy_makes_raising_tools_failed_episodes(tmp_path):
    backend = ScriptedGuesser(game_tokenizer(), script=(7,))
    trainer = _game_trainer(tmp_path, backend, max_steps=1, generation_max_retries=1, tool_error_policy="retry")
    with pytest.raises(NoUsableGenerationError):
        trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [4.0]  # every group, on its first call and its retry
    assert _logged(trainer, "tools/failed_episodes") == [16.0]
    assert "tools/call_frequency" not in trainer.state.log_history[0]  # no kept row to measure


def _scripted_game_trainer(tmp_path, environment_factory):
    """A trainer on ``environment_factory``'s game whose backend guesses 3 on every first turn."""
    tokenizer = game_tokenizer()
    model = build_tiny_model(tokenizer, max_position_embeddings=1024)
    args = tiny_config(tmp_path, per_device_train_batch_size=8, num_generations=2, max_completion_length=128)
    return RecordingTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[aligned_game_reward],
        args=args,
        train_dataset=game_dataset(),
        environment_factory=environment_factory,
        generation_backend=ScriptedGuesser(tokenizer, script=(3,)),
    )


def test_raising_reset_is_a_failed_episode(tmp_path):
    class BrokenOnOddSecrets(FlakyGuessGame):
        def reset(self, secret: int, **kwargs) -> str:
            if secret % 2:
                raise ConnectionError("environment server went away")
            return super().reset(secret, **kwargs)

    trainer = _scripted_game_trainer(tmp_path, BrokenOnOddSecrets)
    trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [2.0, 2.0]  # the odd secrets' groups
    for _, _, tool_mask, _, *_ in trainer.generated:
        dropped = [not any(mask) for mask in tool_mask]
        assert sum(dropped) == 4  # two groups of two rows, all-zero masks (keep and tool masks combined)


class AsyncResetGame(FlakyGuessGame):
    """The game with an ``async def reset`` (an environment that awaits a remote service), and no other async code:
    no async tool or reward function for which TRL would start its event loop."""

    async def reset(self, secret: int, **kwargs) -> str:
        await asyncio.sleep(0)
        return FlakyGuessGame.reset(self, secret, **kwargs)


def test_an_async_reset_runs_on_an_event_loop_without_any_async_tool_or_reward(tmp_path):
    trainer = _scripted_game_trainer(tmp_path, AsyncResetGame)
    trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [0.0, 0.0]
    assert _logged(trainer, "tools/failed_episodes") == [0.0, 0.0]  # every reset ran and returned its observation


def _multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


async def _async_multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


@pytest.mark.parametrize("tool", [_multiply, _async_multiply], ids=["sync", "async"])
def test_transformers_backend_generates_every_turn(tmp_path, tool):
    """The model itself writes the calls (a sequence bias makes it call the tool with a = 3 and, missing b, fail)."""
    call = f'<tool_call>\n{{"name": "{tool.__name__}", "arguments": {{"a": '
    tokenizer = game_tokenizer()
    tokenizer.add_tokens([call])
    ids = {text: tokenizer.convert_tokens_to_ids(text) for text in (call, END)}
    three, eos = tokenizer.convert_tokens_to_ids("3"), tokenizer.eos_token_id
    bias = {(ids[call],): 30.0, (ids[call], three): 60.0, (three, ids[END]): 90.0, (ids[END], eos): 120.0}
    model = build_tiny_model(tokenizer, max_position_embeddings=1024, max_completion_length=8)
    args = tiny_config(
        tmp_path,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=200,
        max_tool_calling_iterations=1,
        generation_kwargs={"sequence_bias": bias},
    )
    trainer = RecordingTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[lambda completions, **kwargs: [float(len(c)) for c in completions]],
        args=args,
        train_dataset=game_dataset(4).remove_columns("secret"),
        tools=[tool],
    )
    trainer.train()
    assert _logged(trainer, "tools/call_frequency") == [1.0, 1.0]
    assert _logged(trainer, "tools/failure_frequency") == [1.0, 1.0]  # b is missing: the tool raises, fed back
    for _, completion_ids, tool_mask, completions, *_ in trainer.generated:
        for ids, mask, messages in zip(completion_ids, tool_mask, completions, strict=True):
            assert 0 in mask and mask[0] == 1
            assert messages[1]["role"] == "tool" and "error" in messages[1]["content"]
            assert "<tool_response>" in tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])


def test_multiple_environments_route_each_row(tmp_path):
    class Counter:
        def reset(self, **kwargs) -> None:
            self.count = 0

        def increment(self, step: int) -> int:
            """Add to the counter.

            Args:
                step: how much to add.
            """
            self.count += step
            return self.count

    tokenizer = game_tokenizer()
    seen: list[tuple[str, str]] = []

    def reward(prompts, environments, environment, **kwargs):
        seen.extend((type(env).__name__, name) for env, name in zip(environments, environment, strict=True))
        return [0.0] * len(prompts)

    dataset = game_dataset(4).add_column("environment", ["game", "counter"] * 2)
    model = build_tiny_model(tokenizer, max_position_embeddings=1024)
    args = tiny_config(tmp_path, per_device_train_batch_size=4, num_generations=2, max_completion_length=128)
    args.shuffle_dataset = False
    trainer = MaxEntGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        environment_factory={"game": FlakyGuessGame, "counter": Counter},
        generation_backend=ScriptedGuesser(tokenizer, script=(3,)),
    )
    trainer.train()
    assert seen and all((kind, name) in {("FlakyGuessGame", "game"), ("Counter", "counter")} for kind, name in seen)
    assert _logged(trainer, "rewards/FlakyGuessGame/mean")  # get_reward as a reward source, as in TRL


def test_listwise_takes_an_episode_as_one_candidate_keyed_by_its_final_answer(tmp_path):
    tokenizer = game_tokenizer()
    backend = ScriptedGuesser(tokenizer, script=(3, 5, 2, 9))
    trainer = _game_trainer(
        tmp_path, backend, tokenizer, tool_timeout=0.5, maxent_objective="listwise", maxent_mode_key="last_line"
    )
    trainer.train()
    assert trainer._batch.texts == ["done"] * 8  # the final answers, which the mode key reads
    assert _logged(trainer, "maxent/weight_entropy")
    assert sum(_logged(trainer, "tools/failed_episodes")) > 0


def test_an_environment_owned_reward_scores_only_its_own_rollouts_as_in_trl(tmp_path):
    """TRL's own case: with several named environments, only some own a `get_reward`; two names of one class share
    one reward column, and that column's function, called directly, scores a rollout of another class as None."""

    class Scored:
        def reset(self, **kwargs) -> None: ...

        def act(self, x: int) -> int:
            """Act.

            Args:
                x: a value.
            """
            return x

        def get_reward(self) -> float:
            return 1.0

    class Plain:
        def reset(self, **kwargs) -> None: ...

        def play(self, x: int) -> int:
            """Play.

            Args:
                x: a value.
            """
            return x

    tokenizer = game_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=build_tiny_model(tokenizer, max_position_embeddings=1024),
        processing_class=tokenizer,
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=tiny_config(tmp_path, per_device_train_batch_size=3, num_generations=3),
        train_dataset=game_dataset(3).add_column("environment", ["scored", "scored2", "plain"]),
        environment_factory={"scored": Scored, "scored2": Scored, "plain": Plain},
    )
    assert trainer.reward_func_names == ["<lambda>", "Scored"]
    assert trainer.reward_weights.tolist() == [1.0, 1.0]
    assert trainer.reward_funcs[-1](environments=[Scored(), Plain()]) == [1.0, None]
