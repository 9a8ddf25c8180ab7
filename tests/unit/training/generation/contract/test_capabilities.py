"""Optional backend capabilities: recognised by `isinstance` when defined, and refused with one clear error when
defined in a shape the trainer cannot use (`contract.capabilities`)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from maxent_grpo.training.generation.backends.rollout_function import RolloutFunctionBackend
from maxent_grpo.training.generation.backends.transformers_backend import TransformersBackend
from maxent_grpo.training.generation.backends.vllm_colocate import VLLMColocateBackend
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.call_ahead import FirstCall, Prefetch, ReplayedFirstCall
from maxent_grpo.training.generation.contract import capabilities
from maxent_grpo.training.generation.contract.capabilities import (
    CAPABILITIES,
    SupportsCancel,
    SupportsContextLength,
    SupportsDeadline,
    SupportsFailureReasons,
    SupportsSamplerLogprobs,
    SupportsStats,
    SupportsTokenPrompts,
    SupportsWeightStaging,
    SupportsWeightSync,
    SupportsWeightVersion,
    SupportsWriteBehind,
    check_backend,
)
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import TokenPrompt
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.episodes.backend import EpisodeBackend

LOGGER = capabilities.__name__


class Bare:
    def generate(self, prompts, counts):
        return [[] for _ in prompts]


class WithWeightSync(Bare):
    def sync_weights(self, model):
        pass


class WithWeightStaging(Bare):
    def stage_weights(self, model):
        pass

    def publish_staged_weights(self):
        pass


class WithWriteBehind(Bare):
    def finish_staged_weights(self):
        pass


class WithDeadline(Bare):
    def set_deadline(self, deadline):
        pass


class WithStats(Bare):
    def __init__(self) -> None:
        self.stats = {"weight_pushes": 0}


class WithFailureReasons(Bare):
    @property
    def reasons(self):
        return ["the server was down"]


class WithCancel(Bare):
    def cancel_requests(self):
        pass


class WithTokenPrompts(Bare):
    def token_prompts(self, prompts):
        return [TokenPrompt((1,)) for _ in prompts]


class WithContextLength(Bare):
    max_model_len = 128


class WithSamplerLogprobs(Bare):
    wants_logprobs = False


class WithWeightVersion(Bare):
    @property
    def weight_version(self):
        return "v1"


ONE_EACH = {
    SupportsWeightSync: WithWeightSync,
    SupportsWeightStaging: WithWeightStaging,
    SupportsWriteBehind: WithWriteBehind,
    SupportsDeadline: WithDeadline,
    SupportsStats: WithStats,
    SupportsFailureReasons: WithFailureReasons,
    SupportsCancel: WithCancel,
    SupportsTokenPrompts: WithTokenPrompts,
    SupportsContextLength: WithContextLength,
    SupportsSamplerLogprobs: WithSamplerLogprobs,
    SupportsWeightVersion: WithWeightVersion,
}


def test_every_capability_has_a_backend_here():
    assert set(ONE_EACH) == set(CAPABILITIES)


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda capability: capability.__name__)
def test_a_backend_has_exactly_the_capabilities_it_defines(capability):
    backend = ONE_EACH[capability]()
    check_backend(backend)  # each fits
    assert [c for c in CAPABILITIES if isinstance(backend, c)] == [capability]
    assert not isinstance(Bare(), capability)


def test_capabilities_may_be_set_on_the_instance():
    backend = Bare()
    backend.set_deadline = lambda deadline: None
    backend.token_prompts = lambda prompts: []
    check_backend(backend)
    assert isinstance(backend, SupportsDeadline) and isinstance(backend, SupportsTokenPrompts)


def test_the_built_in_backends_fit_their_capabilities(tiny_tokenizer):
    sampling = SamplingSettings(max_tokens=8)
    server = VLLMServerBackend("http://127.0.0.1:1", tokenizer=tiny_tokenizer, sampling=sampling)
    colocate = VLLMColocateBackend(SimpleNamespace(), tiny_tokenizer, sampling=sampling, max_model_len=64)
    local = TransformersBackend(SimpleNamespace(use_vllm=False))
    rollout = RolloutFunctionBackend(lambda prompts, trainer: {}, None, str, 10, weights=colocate)
    episodes = EpisodeBackend(server, SimpleNamespace(), environments=None, check=CompletionCheck(10))
    replayed = ReplayedFirstCall(server, Prefetch(0, FirstCall([], []), [], None), lambda completion: True)
    expected = {
        server: {
            SupportsWeightSync,
            SupportsWeightStaging,
            SupportsWriteBehind,
            SupportsDeadline,
            SupportsStats,
            SupportsCancel,
            SupportsTokenPrompts,
            SupportsSamplerLogprobs,
            SupportsWeightVersion,
        },
        colocate: {SupportsWeightSync, SupportsContextLength, SupportsSamplerLogprobs},
        local: set(),
        rollout: {SupportsWeightSync},
        episodes: {SupportsDeadline, SupportsStats, SupportsFailureReasons},
        replayed: {SupportsDeadline, SupportsStats},
    }
    try:
        for backend, supported in expected.items():
            check_backend(backend)
            assert {c for c in CAPABILITIES if isinstance(backend, c)} == supported, type(backend).__name__
        assert not isinstance(
            RolloutFunctionBackend(lambda p, t: {}, None, str, 10, weights=local), SupportsWeightSync
        )
    finally:
        server.close()


class SyncWithoutModel(Bare):
    def sync_weights(self):
        pass


class DeadlineWithKeywordOnly(Bare):
    def set_deadline(self, *, deadline):
        pass


class TokenPromptsWithTwoArguments(Bare):
    def token_prompts(self, prompts, tokenizer):
        return []


class CancelAsProperty(Bare):
    @property
    def cancel_requests(self):
        return None


class StatsAsMethod(Bare):
    def stats(self):
        return {}


class WeightVersionAsMethod(Bare):
    def weight_version(self):
        return "v1"


class SyncNotCallable(Bare):
    sync_weights = True


@pytest.mark.parametrize(
    ("backend_class", "message"),
    [
        (
            SyncWithoutModel,
            "SyncWithoutModel.sync_weights has signature (), but the trainer calls it as sync_weights(model)",
        ),
        (
            DeadlineWithKeywordOnly,
            "DeadlineWithKeywordOnly.set_deadline has signature (*, deadline), but the trainer calls it as "
            "set_deadline(deadline)",
        ),
        (
            TokenPromptsWithTwoArguments,
            "TokenPromptsWithTwoArguments.token_prompts has signature (prompts, tokenizer), but the trainer calls it "
            "as token_prompts(prompts)",
        ),
        (
            CancelAsProperty,
            "CancelAsProperty.cancel_requests is a property, but the trainer calls it as cancel_requests()",
        ),
        (StatsAsMethod, "StatsAsMethod.stats is a method, but the trainer reads it as a value"),
        (
            WeightVersionAsMethod,
            "WeightVersionAsMethod.weight_version is a method, but the trainer reads it as a value",
        ),
        (SyncNotCallable, "SyncNotCallable.sync_weights is a bool, but the trainer calls it as sync_weights(model)"),
    ],
)
def test_a_capability_of_the_wrong_shape_is_one_clear_error(backend_class, message):
    with pytest.raises(TypeError, match="generation_backend " + backend_class.__name__) as raised:
        check_backend(backend_class())
    assert message in str(raised.value)


def test_every_member_that_does_not_fit_is_in_the_one_error():
    class TwoWrong(SyncWithoutModel, StatsAsMethod):
        pass

    with pytest.raises(TypeError) as raised:
        check_backend(TwoWrong())
    assert "TwoWrong.sync_weights" in str(raised.value) and "TwoWrong.stats" in str(raised.value)


def test_generate_is_checked_too():
    class NoCounts:
        def generate(self, prompts):
            return []

    with pytest.raises(TypeError, match=r"NoCounts.generate has signature \(prompts\), but the trainer calls it as"):
        check_backend(NoCounts())
    with pytest.raises(TypeError, match=r"has no generate\(prompts, counts\) method"):
        check_backend(object())


def test_no_backend_of_ones_own_is_nothing_to_check():
    check_backend(None)


def test_a_misspelt_capability_is_warned_about_with_the_name_meant(caplog):
    class Misspelt(Bare):
        generated = 0  # close to `generate`, which it has: no warning
        state = "ready"  # not close enough to `stats`

        def sync_weight(self, model):
            pass

        def set_deadlines(self, deadline):
            pass

    caplog.set_level(logging.WARNING, logger=LOGGER)
    check_backend(Misspelt())
    warned = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert warned == [
        "generation_backend Misspelt has 'set_deadlines', which the trainer never uses: did you mean 'set_deadline'?",
        "generation_backend Misspelt has 'sync_weight', which the trainer never uses: did you mean 'sync_weights'?",
    ]


def test_a_near_name_beside_the_capability_itself_is_not_warned_about(caplog):
    class Both(WithWeightSync):
        sync_weight = 1.0

    caplog.set_level(logging.WARNING, logger=LOGGER)
    check_backend(Both())
    assert not [record for record in caplog.records if record.name == LOGGER]


def test_a_server_backend_without_a_weights_directory_syncs_what_it_staged_when_it_publishes(tiny_tokenizer):
    pushes = []
    server = VLLMServerBackend(
        "http://127.0.0.1:1",
        tokenizer=tiny_tokenizer,
        sampling=SamplingSettings(max_tokens=8),
        weight_sync=lambda: pushes.append("pushed"),
    )
    try:
        server.stage_weights(torch.nn.Linear(1, 1))
        assert pushes == []  # nothing to write ahead with a weight_sync of its own (NCCL)
        server.publish_staged_weights()
        server.publish_staged_weights()  # nothing staged since: no second push
        assert pushes == ["pushed"]
    finally:
        server.close()
