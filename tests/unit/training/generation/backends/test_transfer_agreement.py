"""The weight transfer a trainer and its server agree on (`transfer_agreement.agree`): every pair of sides."""

from __future__ import annotations

import pytest

from maxent_grpo.training.generation.backends.transfer_agreement import WeightTransferMismatchError, agree

URL = "http://127.0.0.1:8000"
DISK, NCCL, BOTH, NEITHER = frozenset({"disk"}), frozenset({"nccl"}), frozenset({"disk", "nccl"}), frozenset()


def test_auto_takes_the_disk_transfer_from_a_server_serving_both_where_vllm_is_not_installed_here():
    assert agree("auto", BOTH, base_url=URL, cuda=True, vllm_here=False) == "disk"


@pytest.mark.parametrize(
    ("wanted", "served", "cuda", "agreed"),
    [
        ("auto", DISK, True, "disk"),  # a CUDA trainer follows a disk server (it guessed NCCL before)
        ("auto", DISK, False, "disk"),
        ("auto", NCCL, True, "nccl"),
        ("auto", BOTH, True, "nccl"),
        ("auto", BOTH, False, "disk"),
        ("disk", DISK, True, "disk"),
        ("disk", BOTH, True, "disk"),
        ("nccl", NCCL, True, "nccl"),
        ("nccl", BOTH, False, "nccl"),  # an explicit choice is the trainer's; TRL says if it has no CUDA
    ],
)
def test_auto_follows_the_server_and_an_explicit_transfer_it_serves_is_kept(wanted, served, cuda, agreed):
    assert agree(wanted, served, base_url=URL, cuda=cuda) == agreed


@pytest.mark.parametrize(
    ("wanted", "served", "cuda", "line"),
    [
        (
            "nccl",
            DISK,
            True,
            f"vllm_weight_transfer='nccl' here, but the vLLM server at {URL} serves 'disk' (started with "
            "--weight-transfer disk): set vllm_weight_transfer to 'disk' (or 'auto'), or restart the server with "
            "`maxent-grpo vllm-serve MODEL --weight-transfer nccl`",
        ),
        (
            "disk",
            NCCL,
            True,
            f"vllm_weight_transfer='disk' here, but the vLLM server at {URL} serves 'nccl' (started with "
            "--weight-transfer nccl): set vllm_weight_transfer to 'nccl' (or 'auto'), or restart the server with "
            "`maxent-grpo vllm-serve MODEL --weight-transfer disk`",
        ),
        (
            "auto",
            NCCL,
            False,
            f"vllm_weight_transfer='auto' here, on a trainer without CUDA, but the vLLM server at {URL} serves only "
            "NCCL: restart it with `maxent-grpo vllm-serve MODEL --weight-transfer disk`",
        ),
        (
            "auto",
            NEITHER,
            True,
            f"vllm_weight_transfer='auto' here, but the vLLM server at {URL} takes no weights (started without "
            "--weight-transfer-config or the disk reload extension): restart it with `maxent-grpo vllm-serve MODEL "
            "--weight-transfer disk`",
        ),
    ],
    ids=["nccl-vs-disk", "disk-vs-nccl", "auto-cpu-vs-nccl", "auto-vs-neither"],
)
def test_a_mismatch_is_one_line_naming_both_sides_and_the_flag_to_change(wanted, served, cuda, line):
    with pytest.raises(WeightTransferMismatchError) as raised:
        agree(wanted, served, base_url=URL, cuda=cuda)
    assert str(raised.value) == line
