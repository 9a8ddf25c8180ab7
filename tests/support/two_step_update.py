"""Two optimizer steps with dropped groups in the second, on two processes under a sharding engine (the probes in
tests/deepspeed and tests/distributed), and the checks on what they record.

Step 1 keeps every group, step 2 is the step under test. The data set repeats one prompt and both processes use the
same backend seed, so before any drop the two processes hold identical rows. Runs, each from the same weights:

- ``empty``: in step 2 every group on both processes comes back empty (AdamW, weight decay 0.1).
- ``reference/<optimizer>/<loss_type>``: nothing is dropped. Both processes hold the same rows, so the engine's mean
  over processes is one process's stock TRL gradient: this is the update stock TRL makes on those rows alone (for
  dapo too: its normaliser counts the tokens of both processes and divides them by the process count).
- ``drop/<optimizer>/<loss_type>``: in step 2 process 1's groups all come back empty; process 0's rows are the
  reference's. The update must equal the reference's.

After each step the engine's probe records a snapshot: the full parameters (``parameters``, flattened, the same on
every process) and this process's shard of the optimizer (``optimizer``: ``masters`` the weights the optimizer steps,
``state`` its tensors, ``steps`` its step counts).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

from maxent_grpo import Completion, MaxEntGRPOTrainer
from maxent_grpo.cli.commands.train import end_training
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import tiny_config

OPTIMIZERS = {"sgd": "sgd", "adamw": "adamw_torch"}
LOSS_TYPES = ("grpo", "dapo", "bnpo")
ROWS_PER_DEVICE = 8  # two whole groups of four per process

#: The engine's record of one optimizer step, see the module docstring.
Snapshot = Callable[[MaxEntGRPOTrainer], dict[str, Any]]


def digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """Varies within a group (the tagged backend numbers its completions), so advantages are not all zero."""
    return [float(completion[-1]) for completion in completions]


class VaryingLengthBackend(TaggedBackend):
    """The tagged completions with 0 to 2 filler characters ("p0|--3"): rows of different lengths, so grpo (a mean
    per sequence), bnpo (a token mean per micro-batch) and dapo (a token mean over the generation batch) differ."""

    def _completion(self, prompt: str) -> Completion:
        tagged = super()._completion(prompt)
        text = tagged.text.replace("|", "|" + "-" * (self._counter % 3), 1)
        ids = [*self.tokenizer(text)["input_ids"], self.tokenizer.eos_token_id]
        return Completion(text=text, prompt_ids=tagged.prompt_ids, completion_ids=ids, logprobs=[-1.0] * len(ids))


class StepRecorder(TrainerCallback):
    """After each optimizer step, the engine's snapshot; after step 1, the backend's faults for step 2."""

    def __init__(self, trainer: MaxEntGRPOTrainer, step_two_empty: frozenset[int], snapshot: Snapshot) -> None:
        self.trainer = trainer
        self.step_two_empty = step_two_empty
        self.snapshot = snapshot
        self.steps: list[dict[str, Any]] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(self.snapshot(self.trainer))
        if state.global_step == 1:
            self.trainer.generation_backend.empty_positions = self.step_two_empty
        return control


def train_two_steps(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: Path,
    optim: str,
    loss_type: str,
    empty_on: tuple[int, ...],
    snapshot: Snapshot,
    **config: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """Two optimizer steps; in step 2 the processes in ``empty_on`` get back no completion for any group. Returns the
    accelerator (to end training with) and the snapshots."""
    args = tiny_config(
        output_dir,
        per_device_train_batch_size=ROWS_PER_DEVICE,
        max_steps=2,
        loss_type=loss_type,
        optim=optim,
        weight_decay=0.1 if optim == "adamw_torch" else 0.0,  # SGD: the update is the gradient times the lr
        max_grad_norm=0.0,
        generation_max_retries=0,
        **config,
    )
    dataset = Dataset.from_dict({"prompt": ["p0:"] * 16})  # one prompt: both processes' rows are alike
    trainer = MaxEntGRPOTrainer(
        model=model, reward_funcs=digit_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = VaryingLengthBackend(tokenizer, seed=0)
    empty = frozenset(range(ROWS_PER_DEVICE)) if rank in empty_on else frozenset()
    recorder = StepRecorder(trainer, empty, snapshot)
    trainer.add_callback(recorder)
    trainer.train()
    accelerator = trainer.accelerator
    del trainer
    return accelerator, recorder.steps


#: ``train(output_dir, optim, loss_type, empty_on)``: one `train_two_steps` run on the engine under test.
Train = Callable[[Path, str, str, tuple[int, ...]], tuple[Any, list[dict[str, Any]]]]


def train_all(output_dir: Path, train: Train) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """Every run of the module docstring; returns the last run's accelerator and the snapshots of each run by name."""
    runs: dict[str, list[dict[str, Any]]] = {}
    accelerator, runs["empty"] = train(output_dir / "empty", "adamw_torch", "grpo", (0, 1))
    for name, optim in OPTIMIZERS.items():
        for loss_type in LOSS_TYPES:
            for kind, empty_on in (("reference", ()), ("drop", (1,))):
                run_dir = output_dir / f"{kind}-{name}-{loss_type}"
                accelerator, runs[f"{kind}/{name}/{loss_type}"] = train(run_dir, optim, loss_type, empty_on)
    return accelerator, runs


def run_all(output_dir: Path, train: Train) -> None:
    """Every run of the module docstring; each process writes rank<r>.json with them, then training ends."""
    accelerator, runs = train_all(output_dir, train)
    rank = accelerator.process_index
    (output_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "runs": runs}))
    end_training(accelerator)


# ------------------------------------------------------------------------------------------------------ checks
def max_difference(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


def norm(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values))


def assert_empty_step_left_no_trace(ranks: list[dict[str, Any]]) -> None:
    """I4 / I6: after the all-dropped step 2, each process's optimizer shard (weights, state, step counts) and the
    full weights are bit-identical to what step 1 left."""
    for rank, runs in enumerate(ranks):
        after_one, after_two = runs["empty"]
        assert set(after_one["optimizer"]["steps"]) == {1.0}, f"process {rank}: step 1 was a real step"
        moved = {
            "full weights": max_difference(after_one["parameters"], after_two["parameters"]),
            "optimizer's weights": max_difference(
                after_one["optimizer"]["masters"], after_two["optimizer"]["masters"]
            ),
            "optimizer state": max_difference(after_one["optimizer"]["state"], after_two["optimizer"]["state"]),
        }
        steps = after_two["optimizer"]["steps"]
        assert moved == dict.fromkeys(moved, 0.0) and steps == after_one["optimizer"]["steps"], (
            f"process {rank}: the empty step moved {moved}, optimizer step counts {steps}"
        )


def assert_stock_update(ranks: list[dict[str, Any]], optimizer: str, loss_type: str) -> None:
    """I6: with process 1's groups all dropped in step 2, the update equals the reference's (stock TRL's on process
    0's rows alone) to float rounding, and both processes hold the same weights."""
    runs = ranks[0]
    reference, dropped = runs[f"reference/{optimizer}/{loss_type}"], runs[f"drop/{optimizer}/{loss_type}"]
    assert reference[0]["parameters"] == dropped[0]["parameters"], "step 1 (nothing dropped) is the same in both runs"
    expected = [b - a for a, b in zip(reference[0]["parameters"], reference[1]["parameters"], strict=True)]
    actual = [b - a for a, b in zip(dropped[0]["parameters"], dropped[1]["parameters"], strict=True)]
    assert norm(expected) > 0
    relative_error = norm([x - y for x, y in zip(actual, expected, strict=True)]) / norm(expected)
    ratio = norm(actual) / norm(expected)
    assert relative_error <= 1e-5, f"update norm {ratio:.4f}x stock TRL's, relative error {relative_error:.3e}"
    assert ranks[1][f"drop/{optimizer}/{loss_type}"][1]["parameters"] == dropped[1]["parameters"]
