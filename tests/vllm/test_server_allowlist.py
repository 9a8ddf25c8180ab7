"""The server runs only what the trainer sends, against the real vLLM server (the session's, started as
``maxent-grpo vllm-serve`` starts one, without a key; the keyed case is in ``test_vllm_serve_command.py``).

Each refused request leaves the served weights as they were (greedy output of a fixed prompt unchanged) and writes
nothing. The route inventory reads vLLM's own app under dev mode, so that a vLLM upgrade that adds a route fails here
until `maxent_grpo.serving.routes` decides it.
"""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path

import pytest
import requests
import torch
from safetensors.torch import load_file, save_file

from maxent_grpo.serving import routes

PROMPT = {"prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 0.0}


def registered_routes(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every route path vLLM's API app registers with dev mode on, for every task it supports."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.tasks import SupportedTask
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "unused"])
    app = build_app(args, supported_tasks=typing.get_args(SupportedTask))
    return {route.path for route in app.routes}


#: A route path as vLLM's API routers declare it (``@router.post("/path")``, ``add_api_route("/path", ...)``, ...).
DECLARED = re.compile(
    r"\.(?:get|post|put|delete|patch|api_route|websocket|add_api_route|add_websocket_route|mount)\(\s*\"(/[^\"]*)\""
)


def declared_routes() -> set[str]:
    """Every route path declared in vLLM's API server code, the routes behind other flags (profiling, LoRA loading,
    pooling models, ...) included."""
    import vllm

    sources = (Path(vllm.__file__).parent / "entrypoints").rglob("*.py")
    return {path for source in sources for path in DECLARED.findall(source.read_text())}


def test_every_route_vllm_registers_or_declares_is_decided_and_the_trainers_routes_exist(monkeypatch):
    registered = registered_routes(monkeypatch)
    decided = routes.TRAINER_ROUTES | routes.SERVED_ROUTES | routes.REFUSED_ROUTES
    assert sorted(registered - decided) == [], "routes no allowlist decision covers: add each to serving/routes.py"
    declared = declared_routes()
    added_by_libraries = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/metrics"}  # FastAPI, metrics
    assert len(declared) > 50 and registered - added_by_libraries <= declared
    assert sorted(declared - decided) == [], "routes no allowlist decision covers: add each to serving/routes.py"
    assert sorted(routes.TRAINER_ROUTES - registered) == []  # the names the client uses are vLLM's
    assert {"/sleep", "/wake_up", "/pause", "/collective_rpc"} <= registered


def greedy(url: str, model: str) -> list[int]:
    answer = requests.post(
        f"{url}/v1/completions", json={**PROMPT, "model": model, "return_token_ids": True}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["token_ids"]


def perturbed_model(source: Path, target: Path) -> Path:
    """A copy of the model in ``source`` whose weights would change the greedy output if loaded."""
    target.mkdir(parents=True)
    tensors = load_file(str(source / "model.safetensors"))
    generator = torch.Generator().manual_seed(0)
    save_file({name: tensor + torch.randn(tensor.shape, generator=generator) for name, tensor in tensors.items()},
              str(target / "model.safetensors"))  # fmt: skip
    return target


def test_vllms_own_worker_methods_and_development_routes_are_refused(server_url, vllm_model_dir, tmp_path):
    model = requests.get(f"{server_url}/v1/models", timeout=30).json()["data"][0]["id"]
    before = greedy(server_url, model)
    outside = perturbed_model(vllm_model_dir, tmp_path / "outside")
    written = tmp_path / "written"
    written.mkdir()
    for method, kwargs in (
        ("reload_weights", {"weights_path": str(outside)}),
        ("save_sharded_state", {"path": str(written)}),
        ("sleep", {}),
    ):
        answer = requests.post(f"{server_url}/collective_rpc", json={"method": method, "kwargs": kwargs}, timeout=60)
        assert answer.status_code == 403, (method, answer.status_code, answer.text[:300])
        assert f"does not run the worker method '{method}'" in answer.json()["error"]
    for route in ("/sleep", "/pause", "/abort_requests", "/reset_mm_cache"):
        answer = requests.post(f"{server_url}{route}", timeout=30)
        assert answer.status_code == 403 and "maxent-grpo vllm-serve does not serve" in answer.json()["error"]
    assert list(written.iterdir()) == []
    assert greedy(server_url, model) == before


def test_a_file_link_out_of_the_weights_directory_is_not_loaded(server_url, vllm_model_dir, tmp_path):
    model = requests.get(f"{server_url}/v1/models", timeout=30).json()["data"][0]["id"]
    before = greedy(server_url, model)
    outside = perturbed_model(vllm_model_dir, tmp_path / "outside")
    version = tmp_path / "weights" / "v1"
    version.mkdir(parents=True)
    (version / "model.safetensors").symlink_to(outside / "model.safetensors")
    reload = {"method": routes.RELOAD_METHOD, "kwargs": {"weights_path": str(version)}}
    answer = requests.post(f"{server_url}/collective_rpc", json=reload, timeout=120)
    assert answer.status_code != 200 and "leads outside the weights directory" in answer.text, answer.text[:500]
    assert greedy(server_url, model) == before
    # the same weights as a real file are taken: the refusal was the link's
    (version / "model.safetensors").unlink()
    os.link(outside / "model.safetensors", version / "model.safetensors")
    assert requests.post(f"{server_url}/collective_rpc", json=reload, timeout=120).status_code == 200
    assert greedy(server_url, model) != before  # (the shared server is reset to its launch weights after the test)
