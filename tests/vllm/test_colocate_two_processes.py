"""Colocate mode on two gloo processes, each with its own real vLLM engine built by TRL."""

from __future__ import annotations

import pytest

from tests.distributed.test_two_processes import _launch

pytestmark = pytest.mark.distributed


def test_two_processes_each_sample_from_the_current_weights(tmp_path, vllm_model_dir):
    rank0, rank1 = _launch(tmp_path, str(vllm_model_dir), probe="probe_colocate.py")

    print(f"two-process colocate sampling_logp_difference/mean per step: {rank0['logp_differences']}")
    assert len(rank0["logp_differences"]) == 3
    assert all(value < 1e-3 for value in rank0["logp_differences"])
    assert rank0["logp_differences"] == rank1["logp_differences"]  # logged values are reduced over both processes
    assert rank0["rows_seen"] == rank1["rows_seen"] == 3 * 6
