"""What runs inside the vLLM server imports nothing of the trainer: importing `maxent_grpo.serving`'s modules, as the
server does by their dotted paths, loads no module of ``maxent_grpo.training`` (nor transformers, nor the trainer's
HTTP client), and the middleware alone loads neither torch nor vLLM."""

from __future__ import annotations

import json
import subprocess
import sys

SERVING_MODULES = ["key_guard", "routes", "reload_extension", "in_place_reload", "weight_delta", "watchdog"]


def loaded_after(*modules: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_importing_the_serving_package_loads_nothing_of_the_trainer():
    loaded = loaded_after(*(f"maxent_grpo.serving.{name}" for name in SERVING_MODULES))
    trainer_side = sorted(name for name in loaded if name.startswith(("maxent_grpo.training", "maxent_grpo.cli")))
    assert trainer_side == [], trainer_side
    assert not {"transformers", "trl", "requests", "maxent_grpo.trainer", "maxent_grpo.config"} & loaded


def test_the_middleware_loads_neither_torch_nor_vllm():
    loaded = loaded_after("maxent_grpo.serving.key_guard")
    assert not {"torch", "vllm"} & loaded


def test_the_extensions_former_path_loads_the_same_class_and_the_reload_method_is_its_own():
    from maxent_grpo.serving import routes
    from maxent_grpo.serving.reload_extension import EXTENSION_QUALNAME, DiskReloadExtension
    from maxent_grpo.training.generation.backends import server_reload_extension

    assert server_reload_extension.DiskReloadExtension is DiskReloadExtension
    assert EXTENSION_QUALNAME == "maxent_grpo.serving.reload_extension.DiskReloadExtension"
    assert callable(getattr(DiskReloadExtension, routes.RELOAD_METHOD))
    assert {routes.RELOAD_METHOD} == routes.RPC_METHODS


def test_the_former_paths_of_the_protocol_capabilities_and_guard_are_the_same_objects():
    from maxent_grpo.serving import key_guard
    from maxent_grpo.training.generation.backends import capabilities as old_capabilities
    from maxent_grpo.training.generation.backends import protocol as old_protocol
    from maxent_grpo.training.generation.backends import server_key_guard as old_guard
    from maxent_grpo.training.generation.contract import capabilities, protocol

    assert old_protocol.GenerationStopped is protocol.GenerationStopped
    assert old_capabilities.SupportsWeightSync is capabilities.SupportsWeightSync
    assert old_guard.ServerKeyGuard is key_guard.ServerKeyGuard
