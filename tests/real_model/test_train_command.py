"""The documented one command trains the real model: `maxent-grpo train --model_name_or_path smollm2 ...`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.cli_runner import offline_env, run_cli

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "real-model.md"


def test_the_guide_s_command_trains_smollm2_and_saves_it(tmp_path):
    command = re.search(
        r"^maxent-grpo train --model_name_or_path smollm2 .*?(?=\n```)", GUIDE.read_text(), re.S | re.M
    )
    assert command is not None
    args = command.group(0).replace("\\\n", " ").split()[1:]
    args = [*args[: args.index("--max_steps")], "--max_steps", "1", "--output_dir", str(tmp_path / "out")]
    assert args[:3] == ["train", "--model_name_or_path", "smollm2"]
    result = run_cli(args, offline_env(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 49152
    assert "Traceback" not in result.stderr
