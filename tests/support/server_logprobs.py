"""A vLLM server's log-probabilities of a fixed text, against a model's: how a test sees which weights it serves."""

from __future__ import annotations

import copy
import os

import requests
import torch
from torch.distributed.tensor import DTensor

from maxent_grpo.serving.key_guard import KEY_VARIABLE, authorization_headers

# The fixed text: a prompt and a continuation of the tiny tokenizer's characters.
PROBE_TEXT = "p3:abcab"


def server_logprobs(base_url: str, ids: list[int]) -> torch.Tensor:
    """The server's log-probability of each of ``ids[1:]`` given the ones before it (its prompt log-probs); with the
    key in ``VLLM_API_KEY``, as the trainer sends it, where the server has one."""
    headers = authorization_headers(os.environ.get(KEY_VARIABLE))
    model = requests.get(f"{base_url}/v1/models", timeout=30, headers=headers).json()["data"][0]["id"]
    payload = {"model": model, "prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 0, "temperature": 0.0}
    answer = requests.post(f"{base_url}/v1/completions", json=payload, timeout=60, headers=headers)
    answer.raise_for_status()
    values = answer.json()["choices"][0]["logprobs"]["token_logprobs"]
    return torch.tensor(values[1 : len(ids)], dtype=torch.float64)


def model_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """``model``'s log-probability of each of ``ids[1:]`` given the ones before it."""
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0, :-1].double().log_softmax(-1)
    return logits.gather(1, torch.tensor(ids[1:], device=logits.device)[:, None])[:, 0].cpu()


class ProbeAfterEachCall:
    """Wraps ``backend.generate``: after every call that brought completions back, the server's log-probs of
    `PROBE_TEXT` against ``model`` (being trained: the server must serve its weights) and against a copy of ``model``
    as it is now (the initial weights; or ``initial``, its log-probs of `PROBE_TEXT` computed beforehand, for a model
    whose weights are sharded), as max absolute differences.

    A sharded model's forward is collective (FSDP2 gathers its parameters), so for one the model's log-probs are
    computed after *every* call, on every process alike (each makes the same calls), whether or not this process got
    completions back: one process's call may come back empty while another's does not."""

    def __init__(self, backend, model: torch.nn.Module, tokenizer, base_url: str, initial: torch.Tensor | None = None):
        self.ids = tokenizer(PROBE_TEXT)["input_ids"]
        if initial is None:
            initial = model_logprobs(copy.deepcopy(model), self.ids)
        self.to_current: list[float] = []
        self.to_initial: list[float] = []
        generate = backend.generate

        sharded = any(isinstance(parameter, DTensor) for parameter in model.parameters())

        def probed(prompts, counts):
            groups = generate(prompts, counts)
            current = model_logprobs(model, self.ids) if sharded or any(groups) else None
            if any(groups):
                served = server_logprobs(base_url, self.ids)
                self.to_current.append((served - current).abs().max().item())
                self.to_initial.append((served - initial).abs().max().item())
            return groups

        backend.generate = probed


def assert_one_pusher_on_policy(rank0: dict, rank1: dict) -> None:
    """`probe_server.py`'s records: one version per step pushed by process 0 alone, the server on the trained weights
    after every call on both processes."""
    print(
        f"two processes, one server: versions {rank0['versions']}, |server - trained| {rank0['to_current']}, "
        f"|server - initial| {rank0['to_initial']}"
    )
    assert rank0["versions"] == rank1["versions"] and len(set(rank0["versions"])) == 3  # one version per step
    assert rank0["weight_pushes"] == 3 and rank1["weight_pushes"] == 0
    assert len(rank0["to_current"]) >= 3 and len(rank1["to_current"]) >= 3
    assert max(rank0["to_current"] + rank1["to_current"]) < 1e-3
    assert min(rank0["to_initial"][1:] + rank1["to_initial"][1:]) > 1e-2  # the model moved, and the server with it
    assert rank0["rows_seen"] == rank1["rows_seen"] == 3 * 6
