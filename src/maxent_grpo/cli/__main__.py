"""`python -m maxent_grpo.cli`: the `maxent-grpo` command (as `accelerate launch -m maxent_grpo.cli train` runs it)."""

import sys

from maxent_grpo.cli.main import main

sys.exit(main())
