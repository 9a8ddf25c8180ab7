"""What runs inside the vLLM server imports nothing of the trainer: importing `maxent_grpo.serving`'s modules, as the
server does by their dotted paths, loads no module of ``maxent_grpo.training`` (nor transformers, nor the trainer's
HTTP client), and the middleware alone loads neither torch nor vLLM."""

from __future__ import annotations

import importlib.util
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


def test_the_reload_method_is_the_extensions_own():
    from maxent_grpo.serving import routes
    from maxent_grpo.serving.reload_extension import EXTENSION_QUALNAME, DiskReloadExtension

    assert EXTENSION_QUALNAME == "maxent_grpo.serving.reload_extension.DiskReloadExtension"
    assert callable(getattr(DiskReloadExtension, routes.RELOAD_METHOD))
    assert {routes.RELOAD_METHOD} == routes.RPC_METHODS


def test_the_former_paths_of_the_extension_guard_protocol_and_capabilities_are_gone():
    former = ["server_reload_extension", "server_key_guard", "protocol", "capabilities"]
    for name in former:  # an unreleased version protects no user with an alias
        assert importlib.util.find_spec(f"maxent_grpo.training.generation.backends.{name}") is None, name
