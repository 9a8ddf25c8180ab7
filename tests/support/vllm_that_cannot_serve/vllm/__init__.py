"""A `vllm` package that is found but serves nothing, for `maxent-grpo vllm-serve` where vLLM is not installed.

With this folder on ``PYTHONPATH`` the command's vLLM check passes and what comes before the server (the port check,
the key warning) runs as it would with vLLM; the server itself exits at once with code 1, as a server that cannot
load its model does. Test-only.
"""
