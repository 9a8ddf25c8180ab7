"""Shared fixtures: the tiny offline model and tokenizer, built once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per test process: the tiny model's matrices are too small for intra-op threads to pay, and
    beside a second process (pytest-xdist's other worker, a server, a launch) OpenMP threads waiting for a busy core
    made a forward and backward ten times slower on 2 cores. `maxent-grpo demo` and the benchmarks do the same."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from maxent_grpo.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny model and tokenizer saved to disk (for code paths that load by path: CLI, servers)."""
    from maxent_grpo.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def default_config_buildable(monkeypatch, tmp_path):
    """Let TRL's default config be built on a CPU-only machine, inside a scratch working directory.

    `GRPOConfig` turns bf16 on by default and `TrainingArguments` rejects that without a bf16 GPU, so on CPU stock
    `GRPOTrainer(model, reward_funcs)` stops at that ValueError too. The default output_dir is relative to the cwd.
    """
    import transformers.training_args

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
