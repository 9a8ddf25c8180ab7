"""`maxent-grpo vllm-serve` on an address beyond loopback without a key warns in one line; with a key, or on
127.0.0.1, it does not. (The server itself cannot start here: the model folder is missing, and the vLLM package on
the path serves nothing; the warning comes before it.)"""

from __future__ import annotations

from tests.e2e.cli_runner import offline_env, run_cli, with_vllm_that_cannot_serve
from tests.support.real_vllm_server import free_port

WARNING = "maxent-grpo vllm-serve: warning: 0.0.0.0 is reachable beyond this machine and the server has no key"


def serve(tmp_path, *options: str, **env: str):
    args = ["vllm-serve", str(tmp_path / "no-model"), "--port", str(free_port()), "--ready-timeout", "120", *options]
    environment = {name: value for name, value in offline_env(tmp_path).items() if name != "VLLM_API_KEY"} | env
    result = run_cli(args, with_vllm_that_cannot_serve(environment), timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stderr.splitlines() if "warning" in line]


def test_a_server_beyond_loopback_without_a_key_is_warned_about_once(tmp_path):
    warnings = serve(tmp_path, "--host", "0.0.0.0")
    assert len(warnings) == 1 and warnings[0].startswith(WARNING), warnings
    assert "--api-key" in warnings[0]
    assert serve(tmp_path, "--host", "0.0.0.0", "--api-key", "k") == []
    assert serve(tmp_path, "--host", "0.0.0.0", VLLM_API_KEY="k") == []  # vLLM's own variable counts too
    assert serve(tmp_path) == []  # 127.0.0.1
