"""The trainer asks its vLLM server which weight transfer it serves before anything loads (`transfer_agreement`).

The servers here are stand-ins answering ``/server_info`` as vLLM 0.31 does (`tests.support.server_info_stand_in`):
no CPU machine can start a server with the NCCL transfer. The real disk server is asked in ``tests/vllm``.
"""

from __future__ import annotations

import pytest

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.serving.reload_extension import EXTENSION_QUALNAME
from maxent_grpo.training.generation.backends.transfer_agreement import (
    WeightTransferMismatchError,
    agreed_weight_transfer,
)
from tests.support.server_info_stand_in import serving_info, vllm_config
from tests.support.training import tiny_config

# A model name that does not exist: a refusal after anything started loading would be another error.
NO_MODEL = "no-such-org/no-such-model"


def _reward(completions, **kwargs):
    return [0.0] * len(completions)


def _server_mode(tmp_path, url, transfer):
    return tiny_config(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_server_base_url=url, vllm_weight_transfer=transfer
    )


def test_an_explicit_transfer_the_server_does_not_serve_stops_before_the_model_loads(tmp_path):
    refused = pytest.raises(WeightTransferMismatchError, match=r"^vllm_weight_transfer='disk' here, but the vLLM")
    with serving_info(vllm_config(nccl=True)) as url, refused:
        MaxEntGRPOTrainer(model=NO_MODEL, reward_funcs=_reward, args=_server_mode(tmp_path, url, "disk"))


@pytest.mark.parametrize(
    ("served", "agreed"), [(vllm_config(extension=EXTENSION_QUALNAME), "disk"), (vllm_config(nccl=True), "nccl")]
)
def test_auto_follows_what_the_server_serves(tmp_path, monkeypatch, served, agreed):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # a CUDA trainer: NCCL is possible
    with serving_info(served) as url:
        config = _server_mode(tmp_path, url, "auto")
        config.use_cpu = False
        assert agreed_weight_transfer(config) == agreed


def test_auto_on_a_cpu_trainer_against_an_nccl_server_is_refused(tmp_path):
    refused = pytest.raises(WeightTransferMismatchError, match=r"on a trainer without CUDA, but .* serves only NCCL")
    with serving_info(vllm_config(nccl=True)) as url, refused:
        agreed_weight_transfer(_server_mode(tmp_path, url, "auto"))


def test_a_server_without_its_development_endpoints_is_refused_naming_the_route(tmp_path):
    refused = pytest.raises(WeightTransferMismatchError, match=r"does not answer /server_info .*VLLM_SERVER_DEV_MODE")
    with serving_info(None) as url, refused:
        agreed_weight_transfer(_server_mode(tmp_path, url, "disk"))
