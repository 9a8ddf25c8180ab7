"""Shared fixtures: the tiny offline model and tokenizer, built once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from maxent_grpo.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny model and tokenizer saved to disk (for code paths that load by path: CLI, servers)."""
    from maxent_grpo.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))
