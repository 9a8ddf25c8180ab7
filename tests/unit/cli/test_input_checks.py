"""The pure checks behind `maxent-grpo train`'s one-line errors: data files, prompts, local paths, checkpoints."""

from __future__ import annotations

import pytest
from datasets import Dataset

from maxent_grpo.cli.commands.train import interrupted_message
from maxent_grpo.cli.data_file_checks import check_data_file
from maxent_grpo.cli.hub_access import looks_local
from maxent_grpo.cli.prompt_checks import check_prompts
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.training.checkpoints.resume import latest_complete_checkpoint


@pytest.mark.parametrize(
    ("name", "local"),
    [
        ("./data", True),
        ("/abs/model", True),
        ("~/model", True),
        ("maths.jsonl", True),
        ("train.PARQUET", True),
        ("my-tiny-lama", False),
        ("trl-lib/tldr", False),
        ("Qwen/Qwen2.5-0.5B", False),
    ],
)
def test_a_name_with_a_path_prefix_or_a_file_extension_is_local(name, local):
    assert looks_local(name) is local


def test_utf8_check_names_the_line_of_the_first_bad_byte(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "\xe9"}\n')
    with pytest.raises(UsageError, match=r"line 3 holds the byte 0xe9"):
        check_data_file(str(path))


def test_utf8_check_counts_lines_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr("maxent_grpo.cli.data_file_checks._CHUNK_BYTES", 7)
    path = tmp_path / "data.txt"
    path.write_bytes("é\n".encode() * 5 + b"\xff\n")  # multi-byte characters split across chunk boundaries
    with pytest.raises(UsageError, match=r"line 6 holds the byte 0xff"):
        check_data_file(str(path))


@pytest.mark.parametrize("content", [b"", b"\n  \n"])
def test_blank_data_files_are_empty(tmp_path, content):
    path = tmp_path / "data.jsonl"
    path.write_bytes(content)
    with pytest.raises(UsageError, match="is empty"):
        check_data_file(str(path))


def test_valid_utf8_passes(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("prompt\nçà va ?\n", encoding="utf-8")
    check_data_file(str(path))


def test_prompts_are_text_or_chat_messages():
    assert check_prompts(Dataset.from_dict({"prompt": ["a", "b"]}), "d") is False
    chat = [[{"role": "user", "content": "hi"}]]
    assert check_prompts(Dataset.from_dict({"prompt": chat}), "d") is True
    with pytest.raises(UsageError, match=r"the prompt of row 1 is None, of type NoneType"):
        check_prompts(Dataset.from_dict({"prompt": ["a", None]}), "d")
    with pytest.raises(UsageError, match=r"the prompt of row 0 is .*, of type list"):
        check_prompts(Dataset.from_dict({"prompt": [[{"text": "no role"}]]}), "d")
    with pytest.raises(UsageError, match="has no rows"):
        check_prompts(Dataset.from_dict({"prompt": []}), "d")


def test_the_latest_complete_checkpoint_is_named_and_a_partial_one_is_skipped(tmp_path):
    assert interrupted_message(str(tmp_path)).startswith("interrupted before a checkpoint was saved")
    for step in (2, 10, 12):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (2, 10):
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert latest_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # 12 has no trainer state
    assert interrupted_message(str(tmp_path)).endswith(f"--resume_from_checkpoint {tmp_path / 'checkpoint-10'}")
