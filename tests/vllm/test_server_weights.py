"""Server mode on a CPU trainer with the disk weight transfer, against a real `vllm` server on 127.0.0.1.

The session's server (`server_url`, see `tests/vllm/conftest.py`), started as `maxent-grpo vllm-serve` starts one,
with the package's reload extension wrapped so that a test can inject reload faults (`faults`, read by
`tests.support.failing_reload`; emptied before each test). Each trainer's first step pushes its own version, so a
test finds the server as launched and leaves it for the next test's reset.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import requests
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import save_tiny_model
from maxent_grpo.training.generation.contract.protocol import GenerationStopped
from maxent_grpo.training.generation.weights import location as weights_location
from maxent_grpo.training.generation.weights.directory import FULL_FOLDER
from tests.support.server_logprobs import PROBE_TEXT, ProbeAfterEachCall, model_logprobs, server_logprobs
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config, train_in_thread
from tests.support.weight_sync import single_try_sync


def server_mode_trainer(model_dir, url, output_dir, peft_config=None, **overrides):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = tiny_config(
        output_dir,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=url,
        per_device_train_batch_size=8,
        bf16=False,  # training computes in float32, as the server does
        **{"vllm_weights_dir": str(Path(output_dir) / "weights"), **overrides},
    )
    return MaxEntGRPOTrainer(
        model=model,
        reward_funcs=AlignedTextReward(),
        args=config,
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        peft_config=peft_config,
    )


def test_server_mode_on_a_cpu_trainer_samples_from_the_current_weights_at_every_step(
    server_url, vllm_model_dir, tmp_path
):
    trainer = server_mode_trainer(vllm_model_dir, server_url, tmp_path, max_steps=4)
    probe = ProbeAfterEachCall(trainer.generation_backend, trainer.model, trainer.processing_class, server_url)
    trainer.train()

    backend = trainer.generation_backend
    print(f"max |server - trained| per call {probe.to_current}; |server - initial| {probe.to_initial}")
    assert trainer.state.global_step == 4
    assert backend.stats["weight_pushes"] == 4  # one version per step, each loaded before the step generated
    logged = [
        entry["generation/weight_pushes"] for entry in trainer.state.log_history if "generation/weight_pushes" in entry
    ]
    assert sum(logged) == 4 and len(logged) == 4  # and each step's push is in its logs
    assert len(probe.to_current) >= 4 and max(probe.to_current) < 1e-3
    assert min(probe.to_initial[1:]) > 1e-2  # the model moved from step 2 on, and the server with it
    weights = sorted(p.name for p in (tmp_path / "weights").iterdir() if not p.name.endswith(".lock"))
    assert weights == [f"weights-{backend.weight_version}"]  # older versions removed (the run's lock stays)
    assert requests.get(f"{server_url}/weight_info", timeout=10).json()["weight_version"] == backend.weight_version


def test_a_peft_model_reaches_the_server_as_its_merged_weights_at_every_step(server_url, vllm_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    trainer = server_mode_trainer(vllm_model_dir, server_url, tmp_path, peft_config=lora, max_steps=3)
    # The trained model is the adapter on the base: its forward is what the merged weights must reproduce.
    probe = ProbeAfterEachCall(trainer.generation_backend, trainer.model, trainer.processing_class, server_url)
    trainer.train()

    print(f"PEFT: max |server - trained| per call {probe.to_current}; |server - initial| {probe.to_initial}")
    assert trainer.generation_backend.stats["weight_pushes"] == 3
    assert len(probe.to_current) >= 3 and max(probe.to_current) < 1e-3
    assert min(probe.to_initial[1:]) > 1e-2  # the adapter moved the model, and the server with it
    served = (tmp_path / "weights" / f"weights-{trainer.generation_backend.weight_version}").glob("*.safetensors")
    from safetensors import safe_open

    names = {name for shard in served for name in safe_open(str(shard), "pt").keys()}  # noqa: SIM118
    assert names and not any("lora" in name or "base_layer" in name or "base_model" in name for name in names)


def test_a_reload_that_fails_once_is_retried_and_training_stays_on_policy(
    server_url, vllm_model_dir, tmp_path, faults
):
    trainer = server_mode_trainer(vllm_model_dir, server_url, tmp_path, max_steps=2)
    probe = ProbeAfterEachCall(trainer.generation_backend, trainer.model, trainer.processing_class, server_url)
    faults.write_text("fail 1")
    trainer.train()

    stats = trainer.generation_backend.stats
    assert trainer.state.global_step == 2
    assert stats["weight_refusals"] == 1 and stats["weight_pushes"] == 2
    assert max(probe.to_current) < 1e-3


@pytest.mark.parametrize("fault", ["fail always", "partial always"])
def test_a_server_that_keeps_refusing_the_weights_stops_training_with_one_line(
    fault, server_url, vllm_model_dir, tmp_path, faults
):
    trainer = server_mode_trainer(vllm_model_dir, server_url, tmp_path, max_steps=3, vllm_request_attempts=2)
    faults.write_text(fault)
    worker, errors = train_in_thread(trainer, timeout=300)

    assert not worker.is_alive(), "training hung on a server that refuses the weights"
    assert len(errors) == 1 and isinstance(errors[0], GenerationStopped), errors
    message = str(errors[0])
    print(message)
    assert "\n" not in message
    assert f"the vLLM server at {server_url} refused the training weights 2 times in a row" in message
    assert ("injected reload failure" if fault == "fail always" else "injected.partial.weight") in message
    assert trainer.state.global_step == 0
    served = requests.get(f"{server_url}/weight_info", timeout=10).json()["weight_version"]
    assert served.endswith(".refused")  # never claimed as the trainer's version


def test_weights_of_another_model_are_refused_by_name_and_leave_the_engine_able_to_reload(shared_server, tmp_path):
    """A trainer pointed at a server of another model (here: two tokens fewer in the vocabulary) stops with the
    tensors that differ; the engine was not touched (vLLM's loaders, failing part-way, left it unable to reload)."""
    other = save_tiny_model(tmp_path / "other-model", hidden_size=256, num_layers=2)
    url = shared_server.base_url
    trainer = server_mode_trainer(other, url, tmp_path / "run", max_steps=2, vllm_request_attempts=2)
    worker, errors = train_in_thread(trainer, timeout=300)

    assert not worker.is_alive(), "training hung on a server that refuses the weights"
    assert len(errors) == 1 and isinstance(errors[0], GenerationStopped), errors
    message = str(errors[0])
    print(message)
    assert "the pushed weights do not fit the served model" in message
    assert "model.embed_tokens.weight [99, 256] (served: [101, 256])" in message
    shared_server.reset()  # reloads the served model's own weights, checked complete


class UploadRecorder:
    """Stands in for the Hub client that `Trainer.push_to_hub` calls (no network here): records the upload."""

    def __init__(self) -> None:
        self.uploads: list[dict] = []

    def upload_folder(self, **kwargs):
        self.uploads.append(kwargs)


def test_a_hub_push_of_the_output_dir_leaves_the_default_weights_directory_out(
    server_url, vllm_model_dir, tmp_path, monkeypatch
):
    from huggingface_hub.utils import filter_repo_objects

    output_dir = tmp_path / "run"
    # No memory-backed directory here (a directory that is not a tmpfs), as on a machine without /dev/shm.
    monkeypatch.setattr(weights_location, "MEMORY_ROOT", tmp_path / "no-shm")
    trainer = server_mode_trainer(vllm_model_dir, server_url, output_dir, max_steps=1, vllm_weights_dir=None)
    trainer.train()
    written = sorted(path.relative_to(output_dir) for path in output_dir.rglob("*.safetensors"))
    assert any(path.parts[0] == "_vllm-weights" for path in written), written  # the disk transport wrote there

    recorder = UploadRecorder()
    monkeypatch.setattr("transformers.trainer.hf_api", lambda: recorder)
    trainer.hub_model_id = "someone/tiny-run"  # a repository that exists (creating one needs the network)
    trainer.push_to_hub()
    [upload] = recorder.uploads
    assert upload["folder_path"] == str(output_dir)
    files = [str(path.relative_to(output_dir)) for path in output_dir.rglob("*") if path.is_file()]
    uploaded = list(filter_repo_objects(files, ignore_patterns=upload["ignore_patterns"]))
    assert "model.safetensors" in uploaded
    assert not [name for name in uploaded if "weights-" in name], uploaded


def test_local_servers_get_the_weights_through_memory_removed_when_the_run_ends(
    server_url, vllm_model_dir, tmp_path, monkeypatch
):
    # A directory taken for the memory-backed file system (mounting a tmpfs needs privileges a test does not have);
    # the choice of it, its checks and its removal are the real ones.
    memory = tmp_path / "shm"
    memory.mkdir()
    monkeypatch.setattr(weights_location, "MEMORY_ROOT", memory)
    monkeypatch.setattr(weights_location, "is_tmpfs", lambda path: path == memory)
    trainer = server_mode_trainer(vllm_model_dir, server_url, tmp_path / "run", max_steps=2, vllm_weights_dir=None)
    probe = ProbeAfterEachCall(trainer.generation_backend, trainer.model, trainer.processing_class, server_url)
    trainer.train()
    weights = trainer.generation_backend.disk_weights
    assert weights is not None and weights.directory.root.parent == weights_location.MEMORY_ROOT
    version_dir = weights.directory.path(trainer.generation_backend.weight_version)
    assert version_dir.is_dir() and max(probe.to_current) < 1e-3
    assert not (tmp_path / "run" / weights_location.DEFAULT_WEIGHTS_FOLDER).exists()
    del trainer, weights, probe
    gc.collect()
    assert not version_dir.exists()  # memory given back once the run's directory is gone


def nudge(model: torch.nn.Module, scale: float) -> None:
    """Change a few elements of one tensor and the whole of another (a delta with sparse and whole entries)."""
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.mlp.down_proj.weight.view(-1)[:5] += scale
        layer.self_attn.o_proj.weight.mul_(1.0 + scale)


def test_a_delta_push_leaves_the_server_as_a_full_push_would_and_a_server_without_its_base_gets_it_whole(
    shared_server, vllm_model_dir, tmp_path
):
    url = shared_server.base_url
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32)
    ids = AutoTokenizer.from_pretrained(vllm_model_dir)(PROBE_TEXT)["input_ids"]
    deltas, fulls = single_try_sync(url, tmp_path / "delta", delta=True), single_try_sync(url, tmp_path / "full")
    deltas.write(model)
    assert deltas.ensure() and not deltas.directory.is_delta(deltas.version)  # the first version goes whole

    nudge(model, 0.05)
    deltas.write(model)
    assert deltas.directory.is_delta(deltas.version)
    assert deltas.ensure() and deltas.push_seconds["server_read"] >= 0
    through_delta = server_logprobs(url, ids)
    assert (through_delta - model_logprobs(model, ids)).abs().max() < 1e-3
    fulls.write(model)
    assert fulls.ensure()
    assert torch.equal(server_logprobs(url, ids), through_delta)  # bit for bit what the whole weights give

    # The full push left the server without the delta's base: the next delta is sent whole, in the same push.
    nudge(model, -0.03)
    deltas.write(model)
    assert deltas.ensure() and (deltas.directory.path(deltas.version) / FULL_FOLDER).is_dir()
    assert (server_logprobs(url, ids) - model_logprobs(model, ids)).abs().max() < 1e-3

    # A server back at its launch weights (as after a restart) holds no base either, and serves another version.
    shared_server.reset()
    nudge(model, 0.02)
    deltas.write(model)
    assert deltas.directory.is_delta(deltas.version)
    assert deltas.ensure() and deltas.served_version() == deltas.version
    assert (server_logprobs(url, ids) - model_logprobs(model, ids)).abs().max() < 1e-3


def test_a_peft_run_with_delta_pushes_stays_on_policy_and_sends_only_the_merged_layers(
    server_url, vllm_model_dir, tmp_path
):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = server_mode_trainer(
        vllm_model_dir, server_url, tmp_path, peft_config=lora, max_steps=3, vllm_weight_delta=True
    )
    probe = ProbeAfterEachCall(trainer.generation_backend, trainer.model, trainer.processing_class, server_url)
    trainer.train()

    weights = trainer.generation_backend.disk_weights
    assert weights is not None and weights.directory.delta is not None
    stats = weights.directory.delta.stats
    print(f"delta: {stats}; |server - trained| {probe.to_current}")
    assert weights.directory.is_delta(trainer.generation_backend.weight_version)
    assert stats.unchanged > 0 and stats.delta_bytes < stats.full_bytes / 2  # the frozen base stays where it is
    assert len(probe.to_current) >= 3 and max(probe.to_current) < 1e-3
    assert min(probe.to_initial[1:]) > 1e-2
