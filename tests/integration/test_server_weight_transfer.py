"""`VLLMServerBackend` and its weight transfer (`weights.transfer.WeightTransfer`), against a real server process
(tests/support/stand_in_vllm/server.py): the transfer alone says whether the server may generate and which version
its completions carry, and the backend is given one way for the weights to reach the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.weights.callable_push import CallablePush
from maxent_grpo.training.generation.weights.transfer import WeightTransfer
from tests.support.stand_in_vllm.process import run_test_server


def push_nothing() -> None:
    """A push of a user's own that does nothing."""


class VersionedTransfer(WeightTransfer):
    """A transfer of a user's own with versions: ``v1``, ``v2``, ... per write; ``serving`` and ``still_serving`` are
    what the server is said to do before and after a call."""

    def __init__(self) -> None:
        self.writes = 0
        self.serving = True
        self.still_serving = True

    def write(self, model: torch.nn.Module) -> None:
        self.writes += 1
        self.version = f"v{self.writes}"

    def ensure(self, wait: bool = True) -> bool:
        return self.serving

    def still_serves(self) -> bool:
        return self.still_serving


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[str]:
    with run_test_server(model_dir=tiny_model_dir) as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def backend(url: str, tokenizer: PreTrainedTokenizerBase, **weights: object) -> VLLMServerBackend:
    return VLLMServerBackend(
        url, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=4), connection_timeout=10.0, **weights
    )


def test_completions_carry_the_version_the_transfer_wrote(server, tokenizer):
    transfer = VersionedTransfer()
    generating = backend(server, tokenizer, weight_transfer=transfer)
    generating.sync_weights(torch.nn.Linear(1, 1))
    assert generating.weight_version == "v1" and generating.disk_weights is None

    groups = generating.generate(["ab", "cd"], [2, 1])
    assert [len(group) for group in groups] == [2, 1]
    assert {c.weight_version for group in groups for c in group} == {"v1"}
    assert not any(c.failed for group in groups for c in group)


def test_a_server_the_transfer_does_not_find_serving_its_version_is_sent_nothing(server, tokenizer):
    transfer = VersionedTransfer()
    generating = backend(server, tokenizer, weight_transfer=transfer)
    generating.sync_weights(torch.nn.Linear(1, 1))
    transfer.serving = False

    assert generating.generate(["ab"], [2]) == [[]]
    assert generating.stats["requests"] == 0 and generating.stats["infrastructure_failures"] == 1


def test_completions_generated_while_the_version_changed_are_marked_failed(server, tokenizer):
    transfer = VersionedTransfer()
    generating = backend(server, tokenizer, weight_transfer=transfer)
    generating.sync_weights(torch.nn.Linear(1, 1))
    transfer.still_serving = False

    groups = generating.generate(["ab"], [2])
    assert len(groups[0]) == 2 and all(c.failed for c in groups[0])
    assert generating.stats["stale_completions"] == 2


@pytest.mark.parametrize(
    "given",
    [
        ("weight_sync", "weights_directory"),
        ("weight_sync", "weight_transfer"),
        ("weight_transfer", "weights_directory"),
    ],
)
def test_a_backend_is_given_one_way_for_the_weights_to_reach_the_server(tokenizer, given):
    ways = {"weight_sync": push_nothing, "weight_transfer": CallablePush(push_nothing), "weights_directory": "w"}
    with pytest.raises(
        ValueError, match=f"give one way for the weights to reach the server, not {' and '.join(given)}$"
    ):
        backend("http://127.0.0.1:1", tokenizer, **{name: ways[name] for name in given})


def test_a_weight_transfer_must_be_one(tokenizer):
    with pytest.raises(ValueError, match="weight_transfer must be a WeightTransfer or None"):
        backend("http://127.0.0.1:1", tokenizer, weight_transfer=lambda: None)


def test_a_pool_refuses_a_weight_transfer_of_its_own(tokenizer):
    # One object would push every server's weights to one URL, and the pool hands its first server's version to the
    # others, which a transfer of one's own cannot take.
    with pytest.raises(ValueError, match=r"a pool takes weights_directory .*, not a weight_transfer"):
        VLLMServerPool(
            ["http://127.0.0.1:1", "http://127.0.0.1:2"],
            tokenizer=tokenizer,
            sampling=SamplingSettings(max_tokens=4),
            weight_transfer=VersionedTransfer(),
        )
