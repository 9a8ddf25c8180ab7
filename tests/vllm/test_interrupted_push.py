"""A weight push ended at any point leaves the real server generating, and the next push succeeds.

A push sends no pause: the reload runs as one engine call between two scheduler steps. Against the session's server
(`shared_server`): `ServerWeightSync` pushes a version and the push is ended once the server has answered one of its
requests (the server did what it asked: reloaded, claimed the version),
the way a run ends it: Ctrl-C in a synchronous run (`KeyboardInterrupt`), a stopping run cutting its sockets
(`AsyncGeneration.close`: the exchange breaks off), or the step's time budget running out while the answer is awaited
(`requests.Timeout`). A response hook on the push's HTTP session raises the ending when that answer arrives, so each
cell ends at a chosen request on a real server. Whatever ended it, the server must answer at once, must not claim a
version it was not told to, and must take the version at the next push.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import torch
from transformers import AutoModelForCausalLM

from maxent_grpo.training.generation.server_client.http_deadline import DeadlineAdapter
from tests.support.server_logprobs import server_logprobs
from tests.support.weight_sync import single_try_sync

STAGES = ("/collective_rpc", "/update_weight_version")
ENDINGS: dict[str, Callable[[], BaseException]] = {
    "ctrl-c": KeyboardInterrupt,
    "sockets-cut": lambda: requests.ConnectionError("the run stopped: its exchanges were cut off"),
    "step-deadline": lambda: requests.Timeout("the generation step's time budget ran out"),
}


class EndOnceAnswered:
    """A response hook: raises ``ending()`` when the first answer to a request for ``stage`` arrives."""

    def __init__(self, stage: str, ending: Callable[[], BaseException]) -> None:
        self.stage, self.ending, self.fired = stage, ending, False

    def __call__(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        if not self.fired and response.request.path_url.startswith(self.stage):
            self.fired = True
            raise self.ending()


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("stage", STAGES)
def test_a_push_ended_part_way_leaves_the_server_generating(
    stage: str, ending: str, shared_server, vllm_model_dir: Path, tmp_path: Path
):
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32)
    session = requests.Session()
    session.mount("http://", DeadlineAdapter())
    end = EndOnceAnswered(stage, ENDINGS[ending])
    session.hooks["response"].append(end)
    sync = single_try_sync(shared_server.base_url, tmp_path / "weights", session=session)
    sync.write(model)
    if ending == "ctrl-c":
        with pytest.raises(KeyboardInterrupt):
            sync.ensure()
    else:
        assert sync.ensure() is False  # an infrastructure failure: this call generates nothing
    assert end.fired

    if stage == "/collective_rpc":  # ended before the claim: the server must not pass as serving the version
        assert sync.served_version() != sync.version
    assert len(server_logprobs(shared_server.base_url, [5, 6, 7])) == 2  # and it answers a request at once
    assert sync.ensure() is True  # the next generation call's push takes the version
    assert sync.served_version() == sync.version
