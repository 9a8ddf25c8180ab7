"""Tool calls of one turn: TRL's messages and error feedback, the retry policy, time limits, async tools."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from maxent_grpo.training.generation.episodes.failure import EpisodeFailed
from maxent_grpo.training.generation.episodes.tool_calls import ToolCallPolicy, run_tool_calls


def _call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def double(x: int) -> int:
    return 2 * x


def broken(x: int) -> int:
    raise RuntimeError(f"cannot take {x}")


def stalls(x: int) -> int:
    time.sleep(10)
    return x


async def async_double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


async def async_stalls(x: int) -> int:
    await asyncio.sleep(10)
    return x


async def async_blocks(x: int) -> int:
    time.sleep(1)  # a sync call inside a coroutine: the loop itself is held
    return x


TOOLS = {tool.__name__: tool for tool in (double, broken, stalls, async_double, async_stalls, async_blocks)}


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_feedback_turns_failures_into_error_messages_in_call_order():
    calls = [_call("double", x=2), _call("broken", x=3), _call("missing"), {"type": "code", "name": "double"}]
    results = run_tool_calls(calls, TOOLS, ToolCallPolicy())
    assert [m["content"] for m in results.messages] == [
        "4",
        "{'error': 'cannot take 3'}",
        "{'error': 'Tool missing not found.'}",
        "{'error': 'Unsupported tool call type: code'}",
    ]
    assert [m["name"] for m in results.messages] == ["double", "broken", "missing", "double"]
    assert results.failures == 3


def test_wrong_arguments_count_as_a_raising_call():
    results = run_tool_calls([_call("double", y=1)], TOOLS, ToolCallPolicy())
    assert results.failures == 1 and "error" in results.messages[0]["content"]


def test_retry_policy_fails_the_episode_on_a_raising_call():
    with pytest.raises(EpisodeFailed, match="cannot take 3") as failure:
        run_tool_calls([_call("broken", x=3)], TOOLS, ToolCallPolicy(on_error="retry"))
    assert failure.value.cause == "tool" and not failure.value.abandoned


@pytest.mark.parametrize("name", ["stalls", "async_stalls", "async_blocks"])
def test_a_call_past_the_time_limit_fails_the_episode_under_either_policy(loop, name):
    started = time.monotonic()
    with pytest.raises(EpisodeFailed, match=r"longer than 0\.2 s") as failure:
        run_tool_calls([_call(name, x=1)], TOOLS, ToolCallPolicy(timeout=0.2, loop=loop))
    assert time.monotonic() - started < 2
    assert failure.value.abandoned


def test_async_tools_run_on_the_loop(loop):
    results = run_tool_calls([_call("async_double", x=5)], TOOLS, ToolCallPolicy(timeout=5, loop=loop))
    assert results.messages == [{"role": "tool", "name": "async_double", "content": "10"}]
