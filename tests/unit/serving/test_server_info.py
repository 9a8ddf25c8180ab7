"""What a vLLM server's ``/server_info`` says about the weight transfer it serves (`serving.server_info`)."""

from __future__ import annotations

import pytest

from maxent_grpo.serving.reload_extension import EXTENSION_QUALNAME
from maxent_grpo.serving.server_info import served_transports


def _config(weight_transfer_config=None, worker_extension_cls=""):
    # The two fields of vLLM 0.31's `VllmConfig` as `/server_info?config_format=json` dumps them.
    return {
        "weight_transfer_config": weight_transfer_config,
        "parallel_config": {"worker_extension_cls": worker_extension_cls, "tensor_parallel_size": 1},
        "model_config": {"logprobs_mode": "processed_logprobs"},
    }


@pytest.mark.parametrize(
    ("config", "served"),
    [
        (_config(), set()),
        (_config({"backend": "nccl"}), {"nccl"}),
        (_config(worker_extension_cls=EXTENSION_QUALNAME), {"disk"}),
        (_config({"backend": "nccl"}, EXTENSION_QUALNAME), {"disk", "nccl"}),
        (_config(worker_extension_cls="my_package.MyReloadExtension"), {"disk"}),  # taken for a subclass
        ({"parallel_config": None}, set()),
    ],
    ids=["neither", "nccl", "disk", "both", "an-extension-of-another-name", "fields-absent"],
)
def test_the_transfers_a_server_serves_come_from_its_weight_transfer_config_and_worker_extension(config, served):
    assert served_transports(config) == served
