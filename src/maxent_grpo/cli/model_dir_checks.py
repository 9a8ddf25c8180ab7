"""Checks of a model `maxent-grpo train` names, before TRL loads it: one line naming the model and what is wrong.

TRL loads the model (and its tokenizer) inside `GRPOTrainer.__init__`, where a config transformers cannot read, a
missing or corrupt weights file, or an option the architecture does not support ends in a traceback from deep inside
transformers or safetensors. Here the config is read with `AutoConfig`, the architecture is built on the meta
device (no memory, no weights) with the requested attention implementation, and a local directory's weights files
are opened (their headers only) and its tokenizer files looked for.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from maxent_grpo.cli.usage_error import UsageError

_SAFETENSORS_INDEX = "model.safetensors.index.json"
_BIN_INDEX = "pytorch_model.bin.index.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def load_model_config(name: str, revision: str | None, trust_remote_code: bool) -> PretrainedConfig:
    """The model's config, as transformers reads it.

    Raises:
        UsageError: no such model, or a config.json that is not JSON or names an architecture transformers lacks.
    """
    try:
        return AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)
    except OSError as error:  # neither a local model directory nor a reachable Hub model (or revision)
        raise UsageError(f"cannot load model {name!r}: {error}") from error
    except (ValueError, KeyError) as error:  # not JSON, an unknown model_type, a field of the wrong form
        raise UsageError(f"cannot load model {name!r}: its config.json: {_first_line(error)}") from error


def check_architecture(name: str, config: PretrainedConfig, attn_implementation: str | None) -> None:
    """The config builds a causal LM (TRL loads one) with ``attn_implementation``; built on the meta device.

    Raises:
        UsageError: an architecture without a causal-LM head, or an attention implementation this model or this
            installation does not support (a kernel that is not installed).
    """
    try:
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    except (ValueError, ImportError) as error:
        option = f" with attn_implementation={attn_implementation!r}" if attn_implementation is not None else ""
        raise UsageError(f"cannot load model {name!r}{option}: {_first_line(error)}") from error


def check_model_dir(name: str) -> None:
    """A local model directory holds readable weights and a tokenizer.

    Raises:
        UsageError: no weights file, a shard index naming a missing or unreadable file, a weights file that is
            corrupt (its header does not parse), or no tokenizer file.
    """
    folder = Path(name).expanduser()
    for path in _weights_files(name, folder):
        _check_weights_file(name, path)
    if not any((folder / file).is_file() for file in _TOKENIZER_FILES):
        raise UsageError(
            f"cannot load model {name!r}: the directory holds no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); "
            "save the tokenizer next to the model (tokenizer.save_pretrained)"
        )


def _weights_files(name: str, folder: Path) -> list[Path]:
    for index_name in (_SAFETENSORS_INDEX, _BIN_INDEX):
        index = folder / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise UsageError(
                    f"cannot load model {name!r}: {index_name} is not a readable shard index ({_first_line(error)})"
                ) from error
            missing = [shard for shard in shards if not (folder / shard).is_file()]
            if missing:
                raise UsageError(
                    f"cannot load model {name!r}: {index_name} names {missing[0]}, which is missing "
                    f"({len(missing)} of {len(shards)} shards missing)"
                )
            return [folder / shard for shard in shards]
    for file_name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / file_name).is_file():
            return [folder / file_name]
    raise UsageError(
        f"cannot load model {name!r}: the directory holds no weights (model.safetensors, pytorch_model.bin or a "
        "sharded index); expected a model saved with save_pretrained"
    )


def _check_weights_file(name: str, path: Path) -> None:
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except (SafetensorError, OSError) as error:
            raise UsageError(f"cannot load model {name!r}: {path.name} is corrupt ({_first_line(error)})") from error
    elif not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise UsageError(f"cannot load model {name!r}: {path.name} is corrupt (not a torch.save archive)")
