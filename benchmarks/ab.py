"""A/B benchmark: stock GRPOTrainer ("before") vs MaxEntGRPOTrainer ("after"), N seeds each, with verdicts.

    python benchmarks/ab.py [--arms before,after] [--seeds 3] [--recipe tiny|tldr]
                            [--output-dir DIR | --update-results]

Same as ``maxent-grpo bench`` (bad input is one line on stderr and exit code 2); ``--help`` lists every option. The
logic lives in `maxent_grpo.bench`.
"""

from __future__ import annotations

import sys

from maxent_grpo.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", *sys.argv[1:]]))
