"""The weight transfers without versions (`CallablePush`, `NCCLTransfer`, `NoTransfer`): what `write`, `stage` and
`publish` do, and that the server always counts as serving their weights; and the disk transfer's
``ensure(wait=False)`` on a process that pushes and on one that does not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from maxent_grpo.training.generation.weights.callable_push import CallablePush
from maxent_grpo.training.generation.weights.nccl import NCCLTransfer
from maxent_grpo.training.generation.weights.no_transfer import NoTransfer
from maxent_grpo.training.generation.weights.transfer import WeightTransfer
from tests.support.weight_sync import single_try_sync

NO_TRANSFER_LOGGER = "maxent_grpo.training.generation.weights.no_transfer"
#: A port nothing listens on: every request to it is refused at once.
REFUSED_URL = "http://127.0.0.1:9"


class TRLGeneration:
    """What `NCCLTransfer` uses of TRL's ``VLLMGeneration``: its ``sync_weights``, counted."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync_weights(self) -> None:
        self.syncs += 1


def test_a_callable_push_pushes_at_each_write_and_a_staged_model_once_at_publish():
    pushes: list[str] = []
    transfer = CallablePush(lambda: pushes.append("push"))
    model = torch.nn.Linear(1, 1)

    transfer.write(model)
    transfer.write(model)
    assert pushes == ["push", "push"]
    transfer.stage(model)
    assert pushes == ["push", "push"]  # nothing can be written ahead: the push waits for publish
    transfer.publish()
    transfer.publish()  # nothing staged since
    assert pushes == ["push", "push", "push"]


@pytest.mark.parametrize(
    "transfer",
    [CallablePush(lambda: None), NCCLTransfer(TRLGeneration()), NoTransfer(REFUSED_URL)],
    ids=["callable", "nccl", "none"],
)
def test_a_transfer_without_versions_never_holds_generation_back_and_adopts_no_version(transfer: WeightTransfer):
    transfer.write(torch.nn.Linear(1, 1))
    assert transfer.version is None
    assert transfer.ensure() and transfer.ensure(wait=False) and transfer.still_serves()
    with pytest.raises(ValueError, match="keeps no weight versions"):
        transfer.adopt("1-run")


def test_the_nccl_transfer_is_trls_push_called_at_each_write_and_at_publish():
    generation = TRLGeneration()
    transfer = NCCLTransfer(generation)
    transfer.write(torch.nn.Linear(1, 1))
    transfer.stage(torch.nn.Linear(1, 1))
    assert generation.syncs == 1
    transfer.publish()
    assert generation.syncs == 2


def test_no_transfer_warns_once_that_generation_is_off_policy(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger=NO_TRANSFER_LOGGER)
    transfer = NoTransfer(REFUSED_URL)
    transfer.write(torch.nn.Linear(1, 1))
    transfer.stage(torch.nn.Linear(1, 1))
    transfer.publish()
    warnings = [record.getMessage() for record in caplog.records if record.name == NO_TRANSFER_LOGGER]
    assert len(warnings) == 1
    assert "off-policy" in warnings[0] and REFUSED_URL in warnings[0]


def test_the_disk_transfer_on_a_process_that_does_not_push_waits_for_the_version_only_when_asked_to(tmp_path: Path):
    transfer = single_try_sync(REFUSED_URL, tmp_path, request_timeout=1.0)
    transfer.write(torch.nn.Linear(1, 1))
    transfer.pusher = False  # as on a process of rank > 0
    assert transfer.ensure() is False  # it asks the server, which cannot be reached
    assert transfer.ensure(wait=False) is True  # a call with no prompt: nothing to wait for


def test_the_disk_transfer_on_the_pushing_process_pushes_a_new_version_even_without_a_prompt(tmp_path: Path):
    transfer = single_try_sync(REFUSED_URL, tmp_path, request_timeout=1.0)
    transfer.write(torch.nn.Linear(1, 1))
    assert transfer.pusher
    assert transfer.ensure(wait=False) is False  # the push was tried, and the server cannot be reached
