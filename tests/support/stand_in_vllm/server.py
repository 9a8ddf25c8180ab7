"""A small local server speaking the part of vLLM's OpenAI-compatible HTTP API that TRL's `VLLMClient` uses.

It really generates, with the tiny offline model of `maxent_grpo.tiny_model` (or any causal LM directory given by
``--model``): ``model.generate`` samples, per-token logprobs come from the processed scores (what vLLM reports with
``--logprobs-mode processed_logprobs``), generation stops at EOS and, as in vLLM, the EOS id is part of ``token_ids``.

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (``prompt`` as one token-id list, a list of
them, a string or a list of strings; ``n`` completions per prompt, prompt-major; ``return_token_ids`` adds
``token_ids`` and ``prompt_token_ids`` to each choice; ``return_tokens_as_token_ids`` keys logprobs as
``"token_id:<id>"``; ``structured_outputs: {"regex": ...}`` constrains the completion text, see
`RegexPrefixProcessor`). Errors come back as vLLM's ``{"error": {...}}`` JSON: 404 for an unknown model, 400 for an
invalid request.

With ``--weight-endpoints`` it also takes the disk weight transfer's routes (whole versions only, no deltas):
``GET /weight_info``, ``POST /collective_rpc`` running the reload (the version's safetensors files loaded into the
model), ``POST /reset_prefix_cache`` and ``POST /update_weight_version``; and ``GET /server_info`` says so, as a
server started with the worker extension does.

Grey failures: ``--token-seconds`` makes every completion request take that long per token asked for (``n`` times
``max_tokens``; a sleep, so the server's throughput is fixed whatever the machine's load, one request at a time);
``SIGUSR1`` switches *hanging* on and off: while on, completion requests and reloads wait (``/health`` and
``/v1/models`` still answer), and those waiting answer late once it is switched off.

Faults are injected on ``/v1/completions`` only (``/health`` and ``/v1/models`` are never faulty), each request
drawing from its own generator seeded by ``--seed`` and the request's arrival number, so a run that sends requests
one at a time sees the same faults every time. See ``--help``.

Usage: ``python tests/support/stand_in_vllm/server.py --port 0 [--model DIR] [fault flags]``; prints ``READY <port>``
on stdout once listening on 127.0.0.1. Test-only: not part of the runtime package.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DEFAULT_MODEL_NAME = "tiny-qwen2"
# vLLM clamps -inf logprobs to this value, as JSON has no infinity.
_MIN_LOGPROB = -9999.0
# What ``GET /server_info`` reports (the fields the trainer reads) with ``--weight-endpoints``: the worker extension.
_WEIGHTS_SERVER_CONFIG = {
    "weight_transfer_config": None,
    "parallel_config": {"worker_extension_cls": "maxent_grpo.serving.reload_extension.DiskReloadExtension"},
    "model_config": {"logprobs_mode": "processed_logprobs"},
}


class BadRequest(Exception):
    """An invalid request: answered with HTTP 400 (or ``status``) and vLLM's error JSON."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Faults:
    """Fault-injection rates: fractions of /v1/completions requests, or of choices for the oov and logprob faults."""

    failure_rate: float = 0.0
    short_rate: float = 0.0
    delay_rate: float = 0.0
    delay_seconds: float = 0.0
    oov_rate: float = 0.0
    null_logprobs_rate: float = 0.0
    nan_logprobs_rate: float = 0.0
    trickle_rate: float = 0.0
    trickle_seconds: float = 0.0
    trickle_headers: bool = False
    corrupt_gzip_rate: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class RequestFaults:
    """The faults drawn for one request."""

    fail: bool
    drop_connection: bool
    delay: bool
    short: bool
    trickle: bool
    corrupt_gzip: bool
    rng: random.Random
    logprobs_rng: random.Random


@dataclass(frozen=True)
class Sample:
    """One generated completion: ids (EOS included when hit), sampled-token logprobs and top alternatives."""

    token_ids: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    finish_reason: str


@dataclass(frozen=True)
class SamplingRequest:
    """The validated sampling fields of a /v1/completions request."""

    n: int
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    logprobs: int | None
    seed: int | None
    token_ids_in_logprobs: bool
    return_token_ids: bool
    regex: str | None


class RegexPrefixProcessor(LogitsProcessor):
    """Structured outputs, the simple way: masks the tokens that would take the completion out of ``pattern``.

    At each step, every token whose text would make the decoded completion (what follows ``prompt_length`` ids) stop
    fully matching the pattern is masked out; EOS stays allowed, the other special tokens are masked. This is exact
    for patterns of which every prefix of a match is itself a match (such as ``[ab]*``), the kind the tests use; vLLM
    handles any pattern.
    """

    def __init__(self, pattern: str, tokenizer: PreTrainedTokenizerBase, prompt_length: int) -> None:
        self.pattern = re.compile(pattern)
        self.prompt_length = prompt_length
        self.eos = tokenizer.eos_token_id
        special = set(tokenizer.all_special_ids)
        self.pieces = {token: tokenizer.decode([token]) for token in range(len(tokenizer)) if token not in special}
        self.tokenizer = tokenizer

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.full_like(scores, -torch.inf)
        mask[:, self.eos] = 0.0
        for row in range(input_ids.shape[0]):
            text = self.tokenizer.decode(input_ids[row, self.prompt_length :], skip_special_tokens=True)
            for token, piece in self.pieces.items():
                if token < scores.shape[1] and self.pattern.fullmatch(text + piece):
                    mask[row, token] = 0.0
        return scores + mask


class TinyEngine:
    """The model, its tokenizer and a lock: one generation at a time."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str, max_model_len: int | None = None
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.vocab_size = len(tokenizer)
        self.max_model_len = max_model_len or int(getattr(model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()
        self.token_seconds = 0.0

    def sample(self, prompt_ids: list[int], params: SamplingRequest) -> list[Sample]:
        """Draw ``params.n`` completions of one prompt with ``model.generate``."""
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {self.max_model_len} tokens, but {len(prompt_ids)} prompt "
                f"tokens and {params.max_tokens} completion tokens were requested."
            )
        input_ids = torch.tensor([prompt_ids] * params.n, dtype=torch.long)
        sampling = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sampling}
        if sampling:
            kwargs.update(
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else None,
                min_p=params.min_p or None,
            )
        if params.regex is not None:
            processor = RegexPrefixProcessor(params.regex, self.tokenizer, len(prompt_ids))
            kwargs["logits_processor"] = LogitsProcessorList([processor])
        with self._lock, torch.no_grad():
            began = time.monotonic()
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=params.max_tokens,
                repetition_penalty=params.repetition_penalty,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                output_scores=True,
                return_dict_in_generate=True,
                **kwargs,
            )
            # A fixed throughput: the request takes token_seconds per token asked for (n x max_tokens), as if every
            # completion ran to max_tokens, however early it stopped and however loaded the machine is.
            time.sleep(max(self.token_seconds * params.n * params.max_tokens - (time.monotonic() - began), 0.0))
        generated = out.sequences[:, input_ids.shape[1] :]
        logprobs = torch.stack(out.scores, dim=1).float().log_softmax(dim=-1)  # [n, T, V]
        return [self._to_sample(generated[row], logprobs[row], params.logprobs) for row in range(params.n)]

    def _to_sample(self, generated: torch.Tensor, logprobs: torch.Tensor, top_n: int | None) -> Sample:
        ids = generated.tolist()
        eos = self.tokenizer.eos_token_id
        hit_eos = eos in ids
        ids = ids[: ids.index(eos) + 1] if hit_eos else ids
        sampled = [_clamp(logprobs[t, token].item()) for t, token in enumerate(ids)]
        top: list[dict[int, float]] = []
        for t, token in enumerate(ids):
            entries = {token: sampled[t]}
            if top_n:
                values, indices = logprobs[t].topk(min(top_n, logprobs.shape[-1]))
                entries.update({int(i): _clamp(v) for i, v in zip(indices.tolist(), values.tolist(), strict=True)})
            top.append(entries)
        return Sample(ids, sampled, top, "stop" if hit_eos else "length")

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def token_name(self, token_id: int, as_id: bool) -> str:
        if as_id or token_id >= self.vocab_size:
            return f"token_id:{token_id}"
        return str(self.tokenizer.convert_ids_to_tokens(token_id))


def _clamp(value: float) -> float:
    return max(value, _MIN_LOGPROB)


# ----------------------------------------------------------------------------------------------------- request parsing


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float = float("inf")) -> float:
    value = body.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _integer(body: dict[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise BadRequest(f"{key} must be an integer >= {low}, got {value!r}")
    return value


def parse_sampling(body: dict[str, Any]) -> SamplingRequest:
    """Validate the sampling fields of a /v1/completions body the way vLLM does (the parts this server uses)."""
    return SamplingRequest(
        n=_integer(body, "n", 1, 1),
        max_tokens=_integer(body, "max_tokens", 16, 1),
        temperature=_number(body, "temperature", 1.0, 0.0),
        top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
        top_k=_integer(body, "top_k", 0, -1),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 1e-9),
        logprobs=_integer(body, "logprobs", None, 0),
        seed=_integer(body, "seed", None, 0),
        token_ids_in_logprobs=bool(body.get("return_tokens_as_token_ids", False)),
        return_token_ids=bool(body.get("return_token_ids", False)),
        regex=_structured_outputs_regex(body),
    )


def _structured_outputs_regex(body: dict[str, Any]) -> str | None:
    """The ``structured_outputs`` field, which TRL's client sends as ``{"regex": <pattern>}`` (the only kind here)."""
    value = body.get("structured_outputs")
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"regex"} or not isinstance(value["regex"], str):
        raise BadRequest(f"structured_outputs must be {{'regex': <pattern>}} on this server, got {value!r}")
    return value["regex"]


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def parse_prompts(prompt: Any, tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> list[list[int]]:
    """Accept a string, a list of strings, one token-id list or a list of token-id lists."""
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif _is_ids(prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = prompt
    else:
        raise BadRequest(f"prompt must be a string, a token-id list or a non-empty list of them, got {prompt!r}")
    encoded = []
    for item in prompts:
        if isinstance(item, str):
            encoded.append(list(tokenizer(item)["input_ids"]))
        elif _is_ids(item):
            if any(t < 0 or t >= vocab_size for t in item):
                raise BadRequest(f"prompt token ids must be in [0, {vocab_size})")
            encoded.append(list(item))
        else:
            raise BadRequest(f"each prompt must be a string or a non-empty token-id list, got {item!r}")
        if not encoded[-1]:
            raise BadRequest("prompt must not be empty")
    return encoded


# ------------------------------------------------------------------------------------------------------ the server


class FaultyServer(ThreadingHTTPServer):
    """`ThreadingHTTPServer` holding the engine, the fault settings and the request counter."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], engine: TinyEngine, faults: Faults, verbose: bool, weights: bool = False
    ) -> None:
        super().__init__(address, Handler)
        self.engine = engine
        self.faults = faults
        self.verbose = verbose
        self.weights = weights
        self.weight_version = "default"
        self.awake = threading.Event()  # cleared while the server hangs (SIGUSR1)
        self.awake.set()
        self._counter_lock = threading.Lock()
        self._requests = 0

    def draw_faults(self) -> RequestFaults:
        """Draw the faults of the next /v1/completions request (always the same draws, whatever the rates)."""
        with self._counter_lock:
            index = self._requests
            self._requests += 1
        rng = random.Random(self.faults.seed * 1_000_003 + index)
        fail, drop, delay, short = (rng.random() for _ in range(4))
        return RequestFaults(
            fail=fail < self.faults.failure_rate,
            drop_connection=drop < 0.5,
            delay=delay < self.faults.delay_rate,
            short=short < self.faults.short_rate,
            # Generators of their own, so that switching these faults on leaves every other draw as it was.
            trickle=random.Random(f"trickle:{self.faults.seed}:{index}").random() < self.faults.trickle_rate,
            corrupt_gzip=random.Random(f"gzip:{self.faults.seed}:{index}").random() < self.faults.corrupt_gzip_rate,
            rng=rng,
            logprobs_rng=random.Random(f"logprobs:{self.faults.seed}:{index}"),
        )


class Handler(BaseHTTPRequestHandler):
    """Routes the three endpoints; keep-alive like a real server."""

    protocol_version = "HTTP/1.1"
    server: FaultyServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(HTTPStatus.OK, b"")
        elif self.path == "/weight_info" and self.server.weights:
            self._send_json(HTTPStatus.OK, {"weight_version": self.server.weight_version})
        elif self.path.partition("?")[0] == "/server_info" and self.server.weights:
            self._send_json(HTTPStatus.OK, {"vllm_config": _WEIGHTS_SERVER_CONFIG, "vllm_env": {}})
        elif self.path == "/v1/models":
            engine = self.server.engine
            model = {"id": engine.name, "object": "model", "owned_by": "vllm", "max_model_len": engine.max_model_len}
            self._send_json(HTTPStatus.OK, {"object": "list", "data": [model]})
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for GET {self.path}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.weights and self.path in ("/collective_rpc", "/reset_prefix_cache", "/update_weight_version"):
            self._weights_route(json.loads(body or b"null"))
            return
        if self.path != "/v1/completions":
            self._send_error(HTTPStatus.NOT_FOUND, f"no route for POST {self.path}")
            return
        self.server.awake.wait()
        faults = self.server.draw_faults()
        if faults.delay:
            time.sleep(self.server.faults.delay_seconds)
        if faults.fail and faults.drop_connection:
            self._drop_connection()
            return
        if faults.fail:
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "injected failure")
            return
        try:
            answer = self._complete(json.loads(body or b"null"), faults)
        except json.JSONDecodeError as exc:
            self._send_error(HTTPStatus.BAD_REQUEST, f"invalid JSON: {exc}")
        except BadRequest as exc:
            self._send_error(exc.status, str(exc))
        else:
            self._send_json(HTTPStatus.OK, answer, trickle=faults.trickle, corrupt_gzip=faults.corrupt_gzip)

    def _weights_route(self, body: Any) -> None:
        """The disk weight transfer's routes (whole versions): reload, reset the (absent) prefix cache, claim."""
        if self.path == "/update_weight_version":
            self.server.weight_version = str(body["new_version"])
            self._send_json(HTTPStatus.OK, {"weight_version": self.server.weight_version})
        elif self.path == "/reset_prefix_cache":
            self._send_json(HTTPStatus.OK, {"success": True})
        else:
            self.server.awake.wait()
            folder = Path(body["kwargs"]["weights_path"])
            tensors: dict[str, torch.Tensor] = {}
            for file in sorted(folder.glob("*.safetensors")):
                tensors |= load_file(file)
            engine = self.server.engine
            with engine._lock, torch.no_grad():
                engine.model.load_state_dict(tensors, strict=False)
            stale = sorted(set(engine.model.state_dict()) - set(tensors) - {"lm_head.weight"})
            report = {"stale": stale, "seconds": {}, "prefix_caching": False}
            self._send_json(HTTPStatus.OK, {"results": [report]})

    def _complete(self, body: Any, faults: RequestFaults) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        engine = self.server.engine
        if body.get("model") != engine.name:
            raise BadRequest(f"The model `{body.get('model')}` does not exist.", HTTPStatus.NOT_FOUND)
        params = parse_sampling(body)
        prompts = parse_prompts(body.get("prompt"), engine.tokenizer, engine.vocab_size)
        choices, completion_tokens = [], 0
        for prompt_ids in prompts:
            for sample in engine.sample(prompt_ids, params):
                choices.append(self._choice(len(choices), prompt_ids, sample, params, faults))
                completion_tokens += len(sample.token_ids)
        if faults.short:
            choices = choices[: faults.rng.randrange(len(choices))]
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": engine.name,
            "choices": choices,
            "usage": {
                "prompt_tokens": sum(len(p) for p in prompts),
                "completion_tokens": completion_tokens,
            },
        }

    def _choice(
        self, index: int, prompt_ids: list[int], sample: Sample, params: SamplingRequest, faults: RequestFaults
    ) -> dict[str, Any]:
        engine = self.server.engine
        text = engine.decode(sample.token_ids)
        token_ids, top = list(sample.token_ids), [dict(entries) for entries in sample.top]
        if faults.rng.random() < self.server.faults.oov_rate:
            position = faults.rng.randrange(len(token_ids))
            bad_id = engine.vocab_size + faults.rng.randrange(100)
            top[position] = {bad_id: top[position].pop(token_ids[position])}
            token_ids[position] = bad_id
        choice: dict[str, Any] = {
            "index": index,
            "text": text,
            "logprobs": None,
            "finish_reason": sample.finish_reason,
            "stop_reason": None,
            "prompt_logprobs": None,
        }
        if params.logprobs is not None:
            choice["logprobs"] = self._spoil(self._logprobs(token_ids, top, params), faults.logprobs_rng)
        if params.return_token_ids:
            choice["token_ids"] = token_ids
            choice["prompt_token_ids"] = prompt_ids
        return choice

    def _logprobs(self, token_ids: list[int], top: list[dict[int, float]], params: SamplingRequest) -> dict[str, Any]:
        engine = self.server.engine
        as_id = params.token_ids_in_logprobs
        offsets, offset = [], 0
        for token_id in token_ids:
            offsets.append(offset)
            offset += len(engine.decode([token_id])) if token_id < engine.vocab_size else 0
        return {
            "text_offset": offsets,
            "token_logprobs": [entries[t] for t, entries in zip(token_ids, top, strict=True)],
            "tokens": [engine.token_name(t, as_id) for t in token_ids],
            "top_logprobs": [{engine.token_name(t, as_id): v for t, v in entries.items()} for entries in top],
        }

    def _spoil(self, logprobs: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
        """Drop a choice's logprobs (``null``), or make one sampled token's logprob NaN, at the configured rates."""
        faults = self.server.faults
        null, nan = rng.random(), rng.random()
        if null < faults.null_logprobs_rate:
            return None
        if nan < faults.nan_logprobs_rate:
            position = rng.randrange(len(logprobs["tokens"]))
            logprobs["token_logprobs"][position] = math.nan
            logprobs["top_logprobs"][position][logprobs["tokens"][position]] = math.nan
        return logprobs

    # ------------------------------------------------------------------------------------------------ responses

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        content_type: str = "application/json",
        trickle: bool = False,
        corrupt_gzip: bool = False,
    ) -> None:
        """Answer; with ``trickle``, the headers at once (or, with ``--trickle-headers``, one byte every
        ``--trickle-seconds`` too) and then the body one byte every ``--trickle-seconds``; with ``corrupt_gzip``, the
        body marked as gzip-encoded although it is not (a client cannot decode it)."""
        try:
            if trickle and self.server.faults.trickle_headers:
                encoding = "Content-Encoding: gzip\r\n" if corrupt_gzip else ""
                head = (
                    f"{self.protocol_version} {int(status)} {status.phrase}\r\nContent-Type: {content_type}\r\n"
                    f"{encoding}Content-Length: {len(payload)}\r\n\r\n"
                )
                self._trickle(head.encode())
            else:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if corrupt_gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
            if not trickle:
                self.wfile.write(payload)
                return
            self._trickle(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (for example after its timeout)

    def _trickle(self, data: bytes) -> None:
        for position in range(len(data)):
            self.wfile.write(data[position : position + 1])
            self.wfile.flush()
            time.sleep(self.server.faults.trickle_seconds)

    def _send_json(
        self, status: HTTPStatus, payload: dict[str, Any], trickle: bool = False, corrupt_gzip: bool = False
    ) -> None:
        self._send(status, json.dumps(payload).encode(), trickle=trickle, corrupt_gzip=corrupt_gzip)

    def _send_error(self, status: HTTPStatus, message: str) -> None:
        error = {"message": message, "type": status.phrase.replace(" ", ""), "param": None, "code": int(status)}
        self._send_json(status, {"error": error})

    def _drop_connection(self) -> None:
        """Close the socket without answering, as a crashed or restarted server would."""
        self.close_connection = True
        with contextlib.suppress(OSError):  # already closed by the client
            self.connection.shutdown(socket.SHUT_RDWR)


# ----------------------------------------------------------------------------------------------------------- main


def load_engine(model_dir: str | None, name: str | None, max_model_len: int | None = None) -> TinyEngine:
    """Load ``model_dir`` with ``from_pretrained``, or build the tiny model in-process when it is None."""
    if model_dir is None:
        from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        model = build_tiny_model(tokenizer)
    else:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    return TinyEngine(model, tokenizer, name or model_dir or DEFAULT_MODEL_NAME, max_model_len)


def _rate(value: str) -> float:
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate must be in [0, 1], got {value}")
    return rate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", help="model directory (from_pretrained); default: build the tiny model in-process")
    parser.add_argument("--served-model-name", help="model id in /v1/models (default: --model, or 'tiny-qwen2')")
    parser.add_argument(
        "--max-model-len",
        type=int,
        help="context length (prompt plus max_tokens); a longer request is answered 400,\nas vLLM does (default: "
        "the model's max_position_embeddings)",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1; 0 picks a free one (default: 0)")
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling and fault injection (default: 0)")
    parser.add_argument(
        "--failure-rate",
        type=_rate,
        default=0.0,
        help="fraction of /v1/completions requests that fail: half with HTTP 500,\n"
        "half by closing the connection without an answer (default: 0)",
    )
    parser.add_argument(
        "--short-rate",
        type=_rate,
        default=0.0,
        help="fraction of requests answered with fewer choices than asked\n(at least one fewer) (default: 0)",
    )
    parser.add_argument(
        "--delay-rate", type=_rate, default=0.0, help="fraction of requests delayed by --delay-seconds (default: 0)"
    )
    parser.add_argument(
        "--delay-seconds",
        type=float,
        default=0.0,
        help="sleep before answering a delayed request; set it beyond the client's\ntimeout (default: 0)",
    )
    parser.add_argument(
        "--oov-rate",
        type=_rate,
        default=0.0,
        help="fraction of choices with one token id replaced by an id >= the vocabulary\nsize (default: 0)",
    )
    parser.add_argument(
        "--trickle-rate",
        type=_rate,
        default=0.0,
        help="fraction of requests whose answer is sent one byte every --trickle-seconds\n(default: 0)",
    )
    parser.add_argument(
        "--trickle-seconds",
        type=float,
        default=0.0,
        help="pause between the bytes of a trickled answer (default: 0)",
    )
    parser.add_argument(
        "--trickle-headers",
        action="store_true",
        help="trickled answers send their status line and headers one byte at a time too",
    )
    parser.add_argument(
        "--null-logprobs-rate",
        type=_rate,
        default=0.0,
        help='fraction of choices answered with "logprobs": null although logprobs were\nasked for (default: 0)',
    )
    parser.add_argument(
        "--nan-logprobs-rate",
        type=_rate,
        default=0.0,
        help="fraction of choices in which one sampled token's logprob is NaN (default: 0)",
    )
    parser.add_argument(
        "--corrupt-gzip-rate",
        type=_rate,
        default=0.0,
        help="fraction of requests answered with a body marked gzip-encoded that is not\n(default: 0)",
    )
    parser.add_argument(
        "--token-seconds",
        type=float,
        default=0.0,
        help="seconds per token asked for (n x max_tokens, all of a request's completions),\nslept: a fixed "
        "throughput (default: 0)",
    )
    parser.add_argument(
        "--weight-endpoints",
        action="store_true",
        help="take the disk weight transfer's routes (whole versions only)",
    )
    parser.add_argument("--num-threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(args.seed)
    engine = load_engine(args.model, args.served_model_name, args.max_model_len)
    faults = Faults(
        failure_rate=args.failure_rate,
        short_rate=args.short_rate,
        delay_rate=args.delay_rate,
        delay_seconds=args.delay_seconds,
        oov_rate=args.oov_rate,
        null_logprobs_rate=args.null_logprobs_rate,
        nan_logprobs_rate=args.nan_logprobs_rate,
        trickle_rate=args.trickle_rate,
        trickle_seconds=args.trickle_seconds,
        trickle_headers=args.trickle_headers,
        corrupt_gzip_rate=args.corrupt_gzip_rate,
        seed=args.seed,
    )
    engine.token_seconds = args.token_seconds
    server = FaultyServer(("127.0.0.1", args.port), engine, faults, args.verbose, args.weight_endpoints)

    def switch_hanging(signum: int, frame: Any) -> None:
        if server.awake.is_set():
            server.awake.clear()
        else:
            server.awake.set()

    def stop(signum: int, frame: Any) -> None:
        # `shutdown` waits for `serve_forever` to return, so it must run outside the thread serving.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGUSR1, switch_hanging)
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The socket is closed and nothing is left to save: skip the interpreter's teardown of torch, which takes seconds.
    os._exit(status)
