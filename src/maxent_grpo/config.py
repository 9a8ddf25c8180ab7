"""`MaxEntGRPOConfig`: TRL's `GRPOConfig` plus generation-robustness and MaxEnt fields, validated on creation."""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from trl import GRPOConfig
from trl.trainer.utils import get_config_model_id

from maxent_grpo.enum_fields import check_choices
from maxent_grpo.field_ranges import check_field_ranges
from maxent_grpo.training.generation.server_client.server_address import same_server

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

#: The fields from which TRL derives the generation batch size when neither is set.
GENERATION_BATCH_FIELDS = ("generation_batch_size", "steps_per_generation")


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{name}={value!r} is invalid: expected {allowed}.")


#: Fields whose value the config's printed and logged forms hide (TRL hides only fields named ``*_token``).
SECRET_FIELDS = ("vllm_server_api_key",)


@dataclass
class MaxEntGRPOConfig(GRPOConfig):
    """Configuration for [`MaxEntGRPOTrainer`].

    Every field of TRL's `GRPOConfig` keeps its meaning (`beta` is the KL coefficient and, for the listwise objective,
    also the weight of the reference prior in the target). The fields below add robust generation and the MaxEnt
    listwise objective. Invalid values raise `ValueError` naming the field, the value and the allowed range: each
    numeric field's range (ours and the TRL fields training relies on) is in `maxent_grpo.field_ranges`, each
    enum-like field's choices (ours, TRL's and transformers') in `maxent_grpo.enum_fields`.

    A field left at its default never conflicts with one the user set: the default gives way, with a log line
    (``maxent_target_weight_entropy`` drops the default anneal ``maxent_tau_final``, for one). A field counts as set
    when its value differs from its default; one set explicitly to its default value cannot be told apart.

    One TRL default differs: with ``use_cpu=True`` and ``use_vllm=True`` and neither ``bf16`` nor ``fp16`` given,
    ``bf16`` is False (TRL makes it True). A CPU run with a vLLM engine or server then scores its completions in the
    float32 that vLLM samples in on the CPU (the colocated engine in the training dtype, ``maxent-grpo vllm-serve
    --dtype float32``); under TRL's default the forward runs in bfloat16 autocast against a float32 engine, and a
    real model's sampling log-prob difference is 0.02-0.07 on average instead of 1e-5. Set ``bf16`` explicitly to
    keep TRL's behaviour. Without vLLM the model samples itself, and TRL's default stays.
    """

    #: Which of ``generation_batch_size`` / ``steps_per_generation`` the user set (TRL derives both), or None.
    _generation_batch_set = None

    # Generation robustness
    generation_max_retries: int | None = field(
        default=None,
        metadata={
            "help": "Retry rounds for prompts whose group came back short; each round asks the backend only for the "
            "missing count. None: as many rounds as `num_generations`. 0: never retry."
        },
    )
    generation_max_consecutive_empty_batches: int = field(
        default=3,
        metadata={
            "help": "Stop with an error after this many consecutive generation batches in which every prompt group "
            "was dropped (such batches make no parameter update)."
        },
    )
    generation_step_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one generation step (first call, retry rounds, dynamic-sampling rounds) may take. Once "
            "spent, no retry round starts on any process, requests to a vLLM server are cut off, and groups still "
            "incomplete are dropped. Generation that cannot be interrupted (transformers, vLLM colocate) finishes the "
            "call it is in. None: no limit."
        },
    )
    vllm_request_timeout: float = field(
        default=600.0,
        metadata={
            "help": "Seconds one request to the vLLM server may take, from connecting to the last byte of the answer, "
            "before it counts as failed and is retried (server mode only)."
        },
    )
    vllm_request_attempts: int = field(
        default=3,
        metadata={"help": "Attempts per vLLM server request on connection errors, timeouts and HTTP 5xx."},
    )
    vllm_dtype: str = field(
        default="training",
        metadata={
            "help": "Data type of the colocated vLLM engine (colocate mode only). 'training': the dtype the training "
            "forward computes in (bfloat16 with bf16, float16 with fp16, else the parameters' dtype), so the engine "
            "samples from the policy being trained (vLLM's own choice turns a float32 checkpoint into bfloat16); "
            "'auto': vLLM's choice, as stock TRL leaves it; or 'float32', 'bfloat16', 'float16'."
        },
    )

    # vLLM server weight transfer
    vllm_weight_transfer: Literal["auto", "nccl", "disk"] = field(
        default="auto",
        metadata={
            "help": "How the training weights reach a vLLM server (server mode). 'disk': each version is written as "
            "safetensors into `vllm_weights_dir` and the server reloads it in place (this package's vLLM worker "
            "extension, tied weights included, a partial load refused); works on CPU and across machines that share "
            "a file system; before every generation call the server is checked to serve the trainer's version, and "
            "a restarted server gets it again. 'nccl': TRL's NCCL push (the trainer needs CUDA; a server that dies "
            "stops training). 'auto': the one the server serves (`maxent-grpo vllm-serve --weight-transfer`), read "
            "from its /server_info before the model loads; with a set of servers, 'disk'. A transfer the server "
            "does not serve stops the run before training, naming both sides."
        },
    )
    vllm_weights_dir: str | None = field(
        default=None,
        metadata={
            "help": "Directory of the disk weight transfer; the vLLM server must read it under the same path (a "
            "shared file system across machines). Only the run's latest version is kept. None: with every server on "
            "this machine (loopback URLs), a memory-backed directory, `/dev/shm/maxent-grpo-weights-<uid>`, when it "
            "and the process's memory cgroup (a job's or container's memory limit) have room for three copies of the "
            "model and it is this user's alone (its versions removed when the run "
            "ends; a run killed outright leaves them until the next run there); else `<output_dir>/_vllm-weights`, "
            "which the Trainer's Hub uploads leave out (they ignore `_*`). Set it when a server on this machine "
            "cannot read that memory (in a container, as another user). A server started with "
            "`vllm-serve --weights-root` reads only under that root: set this inside it."
        },
    )
    vllm_weight_delta: bool = field(
        default=False,
        metadata={
            "help": "Disk weight transfer: write each version after the first as what changed since the one "
            "before (whole tensors, or the changed elements of a tensor where few changed, bit for bit); a server "
            "that does not hold that version (a restart) is sent the whole version. Costs a host copy of the "
            "weights in the pushing process and in each worker of each server (one per tensor-parallel rank), and the "
            "server still reloads every tensor from its copy (only the bytes written and read shrink); pays off when "
            "most weights stay bit-identical between steps (bf16 weights, frozen layers, small learning rates)."
        },
    )
    vllm_server_base_urls: list[str] | None = field(
        default=None,
        metadata={
            "help": "Several vLLM servers (server mode, disk transport), e.g. `http://gen0:8000 http://gen1:8000`: "
            "each generation call spreads its prompt groups over the servers that answer; a server that fails has "
            "its missing completions retried on the others, and is given work again, with the training weights, "
            "once it answers again. Every server reads `vllm_weights_dir` under the same path. None: the one server "
            "of `vllm_server_base_url` (or `vllm_server_host` and `vllm_server_port`)."
        },
    )
    vllm_server_api_key: str | None = field(
        default=None,
        metadata={
            "help": "The key of a vLLM server started with a key (`maxent-grpo vllm-serve --api-key`, or vLLM's "
            "`VLLM_API_KEY`): every request the trainer makes to the server carries it. None: the `VLLM_API_KEY` "
            "environment variable when set, else no key. Never logged: the config's printed and logged forms show "
            "`<VLLM_SERVER_API_KEY>` in its place (the pickled `training_args.bin` of a checkpoint holds it, as it "
            "holds `hub_token`)."
        },
    )

    # Asynchronous generation
    async_generation: bool = field(
        default=False,
        metadata={
            "help": "Generate the next optimizer step's batch on the vLLM server while this one trains (server mode "
            "with the disk weight transfer and vllm_importance_sampling_correction). Its first call is made ahead, "
            "from the weights of the step before; retries, drops and dynamic sampling run as without it, from the "
            "current weights. False: generate each batch when it is trained on."
        },
    )
    max_staleness: int = field(
        default=1,
        metadata={
            "help": "With async_generation: a completion is trained on at most this many optimizer steps after the "
            "weights that sampled it; an older one (or one of unknown version) is asked for again."
        },
    )

    # Reward functions that fail
    reward_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one attempt of one reward function call may take. An attempt past it counts as failed "
            "and is retried: an async function is cancelled, a sync one is left to finish in its thread and its "
            "result is never used. None: wait, as TRL does. Reward models (`reward_model_name_or_path`) are not "
            "bounded."
        },
    )
    reward_retries: int = field(
        default=2,
        metadata={
            "help": "Attempts after the first for a reward function call that timed out or raised a transient error "
            "(ConnectionError, OSError, request errors of requests / httpx / aiohttp, HTTP 408 / 429 / 5xx), with a "
            "short backoff. Rows a call could not score after its retries are unscored: they leave the update as "
            "dropped rows do, never as a made-up 0. Any other error stops the run at once."
        },
    )
    reward_max_consecutive_failed_batches: int = field(
        default=3,
        metadata={
            "help": "Stop with an error naming the function and its last error after this many consecutive training "
            "generation batches in which every call of one reward function failed after its retries (on every "
            "process)."
        },
    )

    # Tools and environments (episodes)
    tool_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one tool call or environment call (`reset`, a tool method) may take. A call past it "
            "fails its episode (the completion slot is retried from the start and, if still missing, its group "
            "dropped); its late result is never used and its environment instance is not reused. None: wait, as TRL "
            "does."
        },
    )
    tool_error_policy: Literal["feedback", "retry"] = field(
        default="feedback",
        metadata={
            "help": "What a tool call that raises does: 'feedback' (TRL's behaviour) returns {'error': ...} to the "
            "model as the tool message and counts it in tools/failure_frequency; 'retry' fails the episode (retried "
            "from the start for its slot, dropped with its group if still missing). An environment `reset` that "
            "raises fails its episode under both."
        },
    )

    # Dynamic sampling (DAPO)
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "After scoring, replace every prompt group without learning signal (all rewards equal, or "
            "dropped) by a fresh prompt's group drawn from the training data, generated through the same backend "
            "and retry/drop path, until every group has signal or `dynamic_sampling_max_rounds` is reached."
        },
    )
    dynamic_sampling_metric: str = field(
        default="sum",
        metadata={
            "help": "Which reward decides whether a group has signal: 'sum' (the weighted sum of all reward "
            "functions, as TRL's advantages use) or the name of one reward function."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=3,
        metadata={"help": "Cap on extra generation rounds per step (like verl's max_num_gen_batches), >= 1."},
    )
    dynamic_sampling_at_cap: Literal["train", "error"] = field(
        default="train",
        metadata={
            "help": "At the cap: 'train' on what was collected (groups without signal get zero advantage), or "
            "'error' to stop with a clear error."
        },
    )

    # MaxEnt listwise objective
    maxent_objective: Literal["grpo", "listwise"] = field(
        default="grpo",
        metadata={
            "help": "'grpo': TRL's advantages and loss, unchanged. 'listwise': each group's advantages come from the "
            "maximum-entropy target w = softmax((log q + beta*l_ref) / (tau + beta)), A = G*w - 1."
        },
    )
    maxent_tau: float = field(
        default=0.25,
        metadata={
            "help": "Entropy temperature tau >= 0: where the anneal to maxent_tau_final starts, the fixed tau when "
            "maxent_tau_final is None, or the initial value when the tau controller is on."
        },
    )
    maxent_tau_final: float | None = field(
        default=0.003,
        metadata={
            "help": "Anneal tau geometrically from maxent_tau to this value (> 0) over the first "
            "maxent_tau_anneal_fraction of max_steps, then hold it (deterministic annealing: explore early, converge "
            "late). None: no schedule (a fixed tau, or the tau controller's)."
        },
    )
    maxent_tau_anneal_fraction: float = field(
        default=1.0,
        metadata={"help": "Fraction in (0, 1] of max_steps over which tau is annealed to maxent_tau_final."},
    )
    maxent_q_temperature: float = field(
        default=1.0, metadata={"help": "Temperature T_q > 0 of the reward softmax q = softmax(reward / T_q)."}
    )
    maxent_q_epsilon: float = field(
        default=0.0, metadata={"help": "Smoothing epsilon in [0, 1): q = (1 - eps) * softmax(r / T_q) + eps / G."}
    )
    maxent_length_normalize_ref: bool = field(
        default=True,
        metadata={"help": "Divide the reference log-prob of a completion by its length (used when beta > 0)."},
    )
    maxent_mode_key: str | None = field(
        default=None,
        metadata={
            "help": "Group candidates by answer so the entropy acts on distinct answers: a built-in name "
            "('first_token', 'last_line', 'boxed', 'final_answer': the final number or line of a free-form answer) "
            "or a dotted path 'package.module:function' to a callable mapping "
            "completion text to a hashable answer. None: candidate-level entropy."
        },
    )
    maxent_mode_probability: Literal["count", "policy"] = field(
        default="count",
        metadata={
            "help": "How the listwise mode form estimates how likely the sampling policy makes each answer of a group "
            "(needs maxent_mode_key). 'count': its share of the group, so every sampled mode is weighted by its "
            "target alone. 'policy': the policy's probability of the mode's distinct sampled completions, and "
            "modes the group over-represents (a nearly lost answer that turned up) get proportionally more weight, "
            "at most maxent_mode_correction_clip times more (importance correction); this keeps rare correct "
            "answers alive. It pulls rare wrong answers up too while tau gives them weight, so anneal tau to near 0 "
            "(maxent_tau_final). Exact when each answer is one short completion; when an answer is reached along "
            "many completions the estimate is low and the clip bounds the error. Costs one forward pass per "
            "training rollout batch unless TRL computed old_per_token_logps (noisy with dropout on: set "
            "disable_dropout)."
        },
    )
    maxent_mode_correction_clip: float | None = field(
        default=None,
        metadata={
            "help": "With maxent_mode_probability='policy': the largest factor (>= 1) by which the importance "
            "correction may raise a mode's weight. None: num_generations (a mode sampled once counts as at least "
            "1 / num_generations**2 likely)."
        },
    )
    maxent_pass_at_k: int = field(
        default=1,
        metadata={
            "help": "Weigh each group's listwise advantages by how much pass@k gains from its prompt: "
            "C(n-c, k-1) / C(n-1, k-1) for c of n candidates at the group's best reward (PKPO, arXiv 2505.15201; "
            "Pass@k Training, 2508.10751), renormalised to mean 1 over the groups with a reward spread; for 0/1 "
            "rewards. 1 (in [1, num_generations]): pass@1, the advantages unchanged."
        },
    )
    maxent_positive_scale: float = field(
        default=1.0,
        metadata={
            "help": "Multiply the positive listwise advantages by this (> 0); below 1 the update leans on pushing "
            "the below-target candidates down (weighted REINFORCE, arXiv 2506.01347). 1: unchanged."
        },
    )
    maxent_mode_coverage_threshold: float = field(
        default=1.0,
        metadata={
            "help": "A completion counts as correct for the maxent/mode_coverage metric when its summed reward is at "
            "least this."
        },
    )
    maxent_target_weight_entropy: float | None = field(
        default=None,
        metadata={
            "help": "Target mean weight entropy (nats) the tau controller steers toward; it replaces the anneal (the "
            "default maxent_tau_final is then dropped, with a log line). None: no controller."
        },
    )
    maxent_tau_lr: float = field(default=0.05, metadata={"help": "Step size of the log-tau controller (> 0)."})
    maxent_tau_min: float = field(default=1e-3, metadata={"help": "Lower clamp of tau (>= 0)."})
    maxent_tau_max: float = field(default=100.0, metadata={"help": "Upper clamp of tau (>= maxent_tau_min)."})
    maxent_tau_warmup_steps: int = field(
        default=0, metadata={"help": "Generation batches before the tau controller starts moving tau (>= 0)."}
    )
    kl_target: float | None = field(
        default=None,
        metadata={
            "help": "Target KL per token for the adaptive beta controller (needs beta > 0). None: beta stays fixed."
        },
    )
    kl_horizon: int = field(default=10000, metadata={"help": "Horizon (in steps) of the adaptive-KL rule (> 0)."})
    kl_ctl_step_size: float = field(
        default=0.2, metadata={"help": "Clip of the proportional error in the adaptive-KL rule, in (0, 1]."}
    )

    def __post_init__(self) -> None:
        # Before TRL's own __post_init__, which divides by some of these values and derives others from them.
        check_field_ranges(self)
        check_choices(self)
        given = {name: getattr(self, name) for name in GENERATION_BATCH_FIELDS}
        # Which of the two the user set, if either (TRL derives both); see `generation_batch_terms`.
        self._generation_batch_set = next((name for name, value in given.items() if value is not None), None)
        if self.use_cpu and self.use_vllm and self.bf16 is None and not self.fp16:  # see the class docstring
            self.bf16 = False
        try:
            super().__post_init__()
        except ValueError:
            problem = self._groups_problem(given)
            if problem is None:
                raise
            raise ValueError(problem) from None
        self._validate_relations()

    def to_dict(self) -> dict[str, Any]:
        """TRL's `to_dict` (what trackio and the other loggers record), with the server key hidden."""
        values = super().to_dict()
        for name in SECRET_FIELDS:
            if values.get(name):
                values[name] = f"<{name.upper()}>"
        return values

    def __str__(self) -> str:
        text = super().__str__()
        for name in SECRET_FIELDS:
            if getattr(self, name):
                text = text.replace(f"\n{name}={getattr(self, name)},\n", f"\n{name}=<{name.upper()}>,\n")
        return text

    __repr__ = __str__

    def _validate(self) -> None:
        check_field_ranges(self)
        check_choices(self)
        self._validate_relations()

    def _is_default(self, name: str) -> bool:
        """Whether field ``name`` holds its default value, which is how this config tells a field the user left
        alone: the constructor (and so TRL's parser, which passes every field) cannot tell a value set explicitly to
        the default from the default. Where such a field conflicts with one the user set, the user's choice wins."""
        spec = self.__dataclass_fields__[name]
        default = spec.default if spec.default is not MISSING else spec.default_factory()
        return getattr(self, name) == default

    def generation_batch_terms(self) -> tuple[str, list[str]]:
        """How the generation batch size follows from the fields the user set: the product in words with its
        values (``"per_device_train_batch_size x gradient_accumulation_steps x processes (4 x 2 x 1 = 8)"``), and
        the fields named in it that can be changed. ``generation_batch_size`` or ``steps_per_generation`` is named
        only when the user set it (TRL derives both from the other fields)."""
        if self._generation_batch_set == "generation_batch_size":
            return f"generation_batch_size ({self.generation_batch_size})", ["generation_batch_size"]
        steps = "steps_per_generation" if self._generation_batch_set else "gradient_accumulation_steps"
        words = f"per_device_train_batch_size x {steps} x processes"
        values = f"{self.per_device_train_batch_size} x {self.steps_per_generation} x {self.world_size}"
        return f"{words} ({values} = {self.generation_batch_size})", ["per_device_train_batch_size", steps]

    def _groups_problem(self, given: dict[str, int | None]) -> str | None:
        """TRL's `__post_init__` raised: the message for a generation batch that does not hold whole groups of
        ``num_generations``, in terms of the fields the user set, or None if TRL raised for something else.

        TRL checks, in order, after deriving ``generation_batch_size`` and ``steps_per_generation`` (both set only
        once the derivation is done): the eval batch, then this."""
        if None in (self.generation_batch_size, self.steps_per_generation) or None not in given.values():
            return None  # TRL stopped before the derivation, or at both fields set
        if self.do_eval and self.eval_strategy != "no":
            eval_groups = self.num_generations_eval or self.num_generations
            if (self.per_device_eval_batch_size * self.world_size) % eval_groups:
                return None
        groups = self.num_generations
        if self.generation_batch_size % groups == 0:
            return None
        terms, fields_to_change = self.generation_batch_terms()
        return (
            f"{terms} must be divisible by num_generations ({groups}): a generation batch holds whole groups of "
            f"num_generations completions of one prompt; change {' or '.join(fields_to_change)}, or set "
            f"num_generations to a divisor of {self.generation_batch_size}"
        )

    def _validate_relations(self) -> None:
        """The rules that tie fields together (each field's own range is in `FIELD_RANGES`, each enum-like field's
        choices in `maxent_grpo.enum_fields`)."""
        if self.reward_weights is not None and not all(
            isinstance(weight, numbers.Real) and not isinstance(weight, bool) and math.isfinite(weight)
            for weight in self.reward_weights
        ):
            _fail("reward_weights", self.reward_weights, "None or a list of finite numbers")
        if self.entropy_coef_max < self.entropy_coef_min:
            _fail("entropy_coef_max", self.entropy_coef_max, f"a number >= entropy_coef_min ({self.entropy_coef_min})")
        if not self.dynamic_sampling_metric:
            _fail("dynamic_sampling_metric", self.dynamic_sampling_metric, "'sum' or a reward function name")
        self._validate_maxent_relations()
        if self.vllm_weights_dir is not None and not str(self.vllm_weights_dir).strip():
            _fail("vllm_weights_dir", self.vllm_weights_dir, "None or a directory path")
        if self.vllm_weight_delta and self.vllm_weight_transfer == "nccl":
            _fail("vllm_weight_delta", True, "false with vllm_weight_transfer='nccl' (deltas go by the disk transfer)")
        self._validate_async_generation()
        self._validate_server_urls()

    def _validate_server_urls(self) -> None:
        urls = self.vllm_server_base_urls
        if urls is None:
            return
        if not isinstance(urls, list | tuple) or not urls:
            _fail("vllm_server_base_urls", urls, "None or a non-empty list of http:// or https:// URLs")
        for url in urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                _fail("vllm_server_base_urls", urls, f"http:// or https:// URLs ({url!r} is not one)")
        stripped = [url.rstrip("/") for url in urls]
        if (twice := same_server(urls)) is not None:
            _fail(
                "vllm_server_base_urls", urls, f"each server once ({twice[0]!r} and {twice[1]!r} reach the same one)"
            )
        if self.vllm_server_base_url is not None and self.vllm_server_base_url.rstrip("/") != stripped[0]:
            _fail(
                "vllm_server_base_urls",
                urls,
                f"None when vllm_server_base_url is set ({self.vllm_server_base_url!r}); give one of the two",
            )
        if len(urls) > 1 and self.vllm_weight_transfer == "nccl":
            _fail(
                "vllm_server_base_urls",
                urls,
                "one URL unless vllm_weight_transfer is 'disk' or 'auto' (TRL's NCCL push reaches one server)",
            )
        # TRL's own client (built with the trainer) talks to the first server.
        self.vllm_server_base_url = stripped[0]

    def _drop_default(self, name: str, value: Any, because: str) -> None:
        """Replace the default of field ``name`` (which the user did not set) by ``value``, saying so."""
        logger.info("%s: its default %r is dropped for %r, because %s.", name, getattr(self, name), value, because)
        setattr(self, name, value)

    def _validate_maxent_relations(self) -> None:
        controller = self.maxent_target_weight_entropy is not None
        if self.maxent_tau_final is not None and self._is_default("maxent_tau_final"):
            # The default anneal gives way to a tau the user chose otherwise.
            if controller:
                self._drop_default(
                    "maxent_tau_final",
                    None,
                    f"maxent_target_weight_entropy={self.maxent_target_weight_entropy!r} turns the tau controller "
                    "on, which sets tau instead of the anneal",
                )
            elif not self.maxent_tau > 0:
                self._drop_default(
                    "maxent_tau_final", None, f"maxent_tau={self.maxent_tau!r} fixes tau (an anneal starts above 0)"
                )
        if self.maxent_tau_final is not None:
            if not self.maxent_tau > 0:
                _fail(
                    "maxent_tau",
                    self.maxent_tau,
                    "a number > 0 when maxent_tau_final is set (for a fixed tau = 0, set maxent_tau_final=None)",
                )
            if controller:
                _fail(
                    "maxent_tau_final",
                    self.maxent_tau_final,
                    "None when maxent_target_weight_entropy is set (the tau controller and the anneal both set tau)",
                )
        if self.maxent_pass_at_k > self.num_generations:
            _fail(
                "maxent_pass_at_k",
                self.maxent_pass_at_k,
                f"an integer in [1, num_generations] = [1, {self.num_generations}] (k samples of one group)",
            )
        if self.maxent_mode_probability == "policy" and self.maxent_mode_key is None:
            _fail(
                "maxent_mode_probability",
                self.maxent_mode_probability,
                "'count' when maxent_mode_key is None (the policy estimate weighs modes)",
            )
        if self.maxent_tau_max < self.maxent_tau_min:
            _fail("maxent_tau_max", self.maxent_tau_max, f"a number >= maxent_tau_min ({self.maxent_tau_min})")
        if (
            controller
            and self._is_default("maxent_tau")
            and not self.maxent_tau_min <= self.maxent_tau <= self.maxent_tau_max
        ):
            # The default initial tau gives way to the clamp the user chose.
            start = min(max(self.maxent_tau, self.maxent_tau_min), self.maxent_tau_max)
            if start > 0:
                self._drop_default(
                    "maxent_tau",
                    start,
                    f"the tau controller keeps tau in [maxent_tau_min, maxent_tau_max] = [{self.maxent_tau_min}, "
                    f"{self.maxent_tau_max}], so it starts at {start}",
                )
        if controller and not (self.maxent_tau > 0 and self.maxent_tau_min <= self.maxent_tau <= self.maxent_tau_max):
            _fail(
                "maxent_tau",
                self.maxent_tau,
                f"a number > 0 in [maxent_tau_min, maxent_tau_max] = [{self.maxent_tau_min}, {self.maxent_tau_max}] "
                "when maxent_target_weight_entropy is set",
            )
        if self.kl_target is not None and not self.beta > 0:
            _fail("beta", self.beta, "a number > 0 when kl_target is set (the controller scales beta)")
        if self.maxent_mode_key is not None:
            from maxent_grpo.objective.mode_keys import resolve_mode_key

            try:
                resolve_mode_key(self.maxent_mode_key)
            except ValueError as error:
                raise ValueError(f"maxent_mode_key={self.maxent_mode_key!r} is invalid: {error}") from error

    def _validate_async_generation(self) -> None:
        """The fields ``async_generation`` needs, judged from the config alone (what also needs the trainer's other
        arguments or the machine, `training.combination_checks.check_async_generation` refuses)."""
        if not self.async_generation:
            return
        if not (self.use_vllm and self.vllm_mode == "server"):
            _fail(
                "async_generation",
                self.async_generation,
                "False unless use_vllm=True and vllm_mode='server' (colocated vLLM and transformers generation share "
                "the training device and model: nothing to overlap)",
            )
        if not self.vllm_importance_sampling_correction:
            _fail(
                "async_generation",
                self.async_generation,
                "False unless vllm_importance_sampling_correction=True (completions sampled from the weights of the "
                "step before need TRL's importance-sampling correction)",
            )
        if self.vllm_weight_transfer == "nccl":
            _fail(
                "async_generation",
                self.async_generation,
                "False unless vllm_weight_transfer is 'disk' or 'auto' resolving to it (only the disk transport "
                "versions the weights, which staleness is counted from)",
            )


def maxent_config_from(args: GRPOConfig | None, model: str | PreTrainedModel) -> MaxEntGRPOConfig:
    """The `MaxEntGRPOConfig` a trainer given ``args`` and ``model`` runs with, as a drop-in for `GRPOTrainer`.

    - None: ``MaxEntGRPOConfig(f"{model_name}-GRPO")``, the default `GRPOTrainer` builds, where ``model_name`` is the
      last path component of the model id (``model`` itself when it is a string, else its config's ``_name_or_path``).
    - a `MaxEntGRPOConfig`: returned unchanged.
    - a plain `GRPOConfig`: a `MaxEntGRPOConfig` with the same values and every MaxEnt field at its default. The values
      are copied as they stand after `GRPOConfig.__post_init__` (which derives some fields from others, such as
      ``generation_batch_size`` from ``steps_per_generation``, and would reject both set at once), not re-derived.

    Raises:
        TypeError: ``args`` is anything else; the trainer calls this before it loads anything.
    """
    if isinstance(args, MaxEntGRPOConfig):
        return args
    if args is None:
        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        return MaxEntGRPOConfig(f"{model_name.split('/')[-1]}-GRPO")
    if not isinstance(args, GRPOConfig):
        raise TypeError(f"args must be a MaxEntGRPOConfig, a trl.GRPOConfig or None, got {type(args).__name__}.")
    config = MaxEntGRPOConfig.__new__(MaxEntGRPOConfig)
    config.__dict__.update(vars(args))
    # Both are derived by now; steps_per_generation counts as set where it differs from what TRL derives alone.
    derived = args.steps_per_generation == args.gradient_accumulation_steps
    config._generation_batch_set = None if derived else "steps_per_generation"
    grpo_fields = {spec.name for spec in fields(GRPOConfig)}
    for spec in fields(MaxEntGRPOConfig):
        if spec.name not in grpo_fields:
            setattr(config, spec.name, spec.default if spec.default is not MISSING else spec.default_factory())
    config._validate()
    return config
