"""A/B benchmarks of trainers with run-to-run variance: ``maxent-grpo bench`` / ``python benchmarks/ab.py``."""

from maxent_grpo.bench.command import main

__all__ = ["main"]
