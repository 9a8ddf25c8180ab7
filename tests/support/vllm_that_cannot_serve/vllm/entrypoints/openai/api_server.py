"""The server module `maxent-grpo vllm-serve` runs: here it exits at once with code 1 (see the package's docstring)."""

import sys

sys.exit("this test's vllm package serves nothing")
