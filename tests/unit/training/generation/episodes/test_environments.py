"""The environment pool: one instance per episode within a step, reused across steps, never after a timeout."""

from __future__ import annotations

import time

import pytest

from maxent_grpo.training.generation.episodes.environments import EnvironmentPool, environment_tools, observed_prompt
from maxent_grpo.training.generation.episodes.failure import EpisodeFailed


class Game:
    def reset(self, seed: int, **kwargs) -> str | None:
        if seed < 0:
            raise ConnectionError("gone")
        if seed == 99:
            time.sleep(10)
        self.seed = seed
        return None if seed == 0 else f" seed {seed}"

    def move(self, step: int) -> int:
        return step

    def get_reward(self) -> float:
        return 0.0

    def _private(self) -> None: ...


def _pool(timeout: float | None = None) -> EnvironmentPool:
    return EnvironmentPool({None: Game}, {None: [Game()]}, multi=False, timeout=timeout, loop=None)


def test_tools_are_the_public_methods_but_reset_and_get_reward():
    assert [tool.__name__ for tool in environment_tools(Game())] == ["move"]


def test_an_observation_is_appended_to_the_last_message():
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    assert observed_prompt(prompt, None) is prompt
    assert observed_prompt(prompt, " now")[-1] == {"role": "user", "content": "go now"}
    blocks = observed_prompt(prompt, [{"type": "text", "text": "x"}])[-1]["content"]
    assert blocks == [{"type": "text", "text": "go"}, {"type": "text", "text": "x"}]
    assert prompt[-1]["content"] == "go"  # the dataset's row is left untouched


def test_each_episode_of_a_step_gets_its_own_instance_and_the_next_step_reuses_them():
    pool = _pool()
    first = [pool.start({"seed": s})[0] for s in (1, 2, 3)]
    assert len({id(env) for env in first}) == 3 and [env.seed for env in first] == [1, 2, 3]
    pool.begin_step()
    again = [pool.start({"seed": 4})[0] for _ in range(3)]
    assert {id(env) for env in again} == {id(env) for env in first}


def test_a_raising_reset_fails_the_episode():
    with pytest.raises(EpisodeFailed, match="ConnectionError: gone") as failure:
        _pool().start({"seed": -1})
    assert failure.value.cause == "tool"


def test_a_reset_past_the_limit_abandons_its_instance():
    pool = _pool(timeout=0.2)
    with pytest.raises(EpisodeFailed, match=r"longer than 0\.2 s"):
        pool.start({"seed": 99})
    pool.begin_step()
    assert pool.instances[None] == []  # the probe instance is still running its reset: never handed out again
    assert isinstance(pool.start({"seed": 1})[0], Game)


def test_a_row_names_its_environment():
    pool = EnvironmentPool({"a": Game, "b": Game}, {"a": [], "b": []}, multi=True, timeout=None, loop=None)
    instance, observation = pool.start({"environment": "b", "seed": 2})
    assert observation == " seed 2" and pool.instances["b"] == [instance]
    with pytest.raises(ValueError, match="environment='c'"):
        pool.start({"environment": "c", "seed": 2})
