"""The real model's cache, built for real: an altered folder is rebuilt, and a full disk leaves nothing behind.

Both start from a cache of their own holding only the wheel (hard-linked from the session's cache, which
`real_model_dir` filled), so each really dequantizes the GGUF file and writes the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from maxent_grpo import smollm2
from maxent_grpo.smollm2 import MODEL_FOLDER, ModelBuildError, cache_root, smollm2_dir, verify_model_dir


def _cache_with_the_wheel(root):
    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    source = cache_root() / "wheels" / smollm2.WHEEL_NAME
    try:
        os.link(source, wheels / smollm2.WHEEL_NAME)
    except OSError:  # another file system
        shutil.copy(source, wheels / smollm2.WHEEL_NAME)
    return root


def test_an_altered_folder_is_named_and_rebuilt_never_used(real_model_dir, tmp_path):
    root = _cache_with_the_wheel(tmp_path / "cache")
    folder = root / "models" / MODEL_FOLDER
    shutil.copytree(real_model_dir, folder)
    with open(folder / "model.safetensors", "r+b") as weights:  # one flipped byte deep in the weights
        weights.seek(300_000_000)
        byte = weights.read(1)
        weights.seek(300_000_000)
        weights.write(bytes([byte[0] ^ 0xFF]))
    reports: list[str] = []
    assert smollm2_dir(root, report=reports.append) == folder
    assert "model.safetensors does not match its SHA-256" in reports[0] and "building it again" in reports[0]
    assert verify_model_dir(folder) is None
    assert smollm2._sha256(folder / "model.safetensors") == smollm2._sha256(real_model_dir / "model.safetensors")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a disk that fills up) needs root")
def test_a_full_disk_stops_the_build_with_one_line_and_leaves_no_folder(tmp_path):
    root = tmp_path / "small"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300m", "tmpfs", str(root)], check=True)
    try:
        _cache_with_the_wheel(root)  # 93 MB; the GGUF file taken out of it 98 MB; the weights (538 MB) do not fit
        with pytest.raises(ModelBuildError, match=r"writing the model folder .* failed") as error:
            smollm2_dir(root, report=lambda line: None)
        assert "\n" not in str(error.value)
        assert sorted(path.name for path in (root / "models").iterdir()) == [f".{MODEL_FOLDER}.lock"]
    finally:
        subprocess.run(["umount", str(root)], check=True)
