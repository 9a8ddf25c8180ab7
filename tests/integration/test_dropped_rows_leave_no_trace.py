"""I6 over TRL's settings: the gradient and the update with dropped rows equal those of the kept rows alone.

The matrix: every TRL 1.16 `loss_type` x the optimizer-window layout (steps_per_generation below, equal to and above
gradient_accumulation_steps) x TRL's entropy bonus (off, on) x {no drop, partial drop, one generation batch of the
window fully dropped, the whole window dropped, and the same two through scoring: rows the reward function could not
score after its retries, which leave as dropped rows do} (and the listwise objective with policy mode probabilities
over drops and layouts). The tiny model really trains through `MaxEntGRPOTrainer`. Every micro-batch of each
optimizer window (placeholder rows included) is recorded, with the gradient and the parameters around each optimizer
step.

The reference is stock TRL's `GRPOTrainer._compute_loss` on the same micro-batches with the dropped rows physically
removed, on a copy of the weights, with the micro-batches that hold nothing left out of TRL's averages: for the
losses TRL normalises per micro-batch, and for its entropy bonus, a micro-batch without a kept row does not count;
for dapo, cispo and vespo (normalised by their generation batch's kept tokens) a generation batch without a kept
token does not count. The same optimizer (its state copied) then steps on that gradient. A window whose micro-batches
hold no kept row must leave every parameter exactly as it was.

How the matrix is run: what a window holds (its generation, rewards, advantages, shuffle and old log-probs) does not
depend on the loss type or the entropy bonus, which only enter the loss and the window plan's factors. So each
(layout, drop) cell trains once for real, through `Trainer.train()`, as one of its (loss type, entropy) cells
(`TRAINED_AS`, every loss type and both entropy settings among them); every other (loss type, entropy) cell of it
*replays* that recorded window (`_replay`): the same trainer, set up for the cell (`_configure`), runs its own
micro-step `training_step` on each recorded micro-batch (the window plan from its `_plan_of`, `_compute_loss` with
the keep mask and the window factors, the backward an empty window skips) and then its optimizer's step, from the
weights and optimizer state recorded before the window's step; only generation is replaced, by the recorded
micro-batches. `test_a_reconfigured_trainer_is_one_built_for_its_cell` pins that a reconfigured trainer holds
exactly the settings a trainer built for the cell would. The tests of the tool mask, of the KL / entropy-quantile
settings and of masked truncated completions replay their other loss types the same way; the tests whose property
is about the training loop (reused generation batches, skipped or empty optimizer steps, step time, adaptive entropy,
the listwise advantages) train every case.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from trl import GRPOTrainer

from maxent_grpo import Completion, MaxEntGRPOTrainer
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from maxent_grpo.training.kept_rows import ROW_KEEP_KEY
from maxent_grpo.training.optimizer_window import WindowPlanner
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: TRL normalises these per micro-batch (rows or tokens) and averages micro-batches; the others by the kept tokens of
#: the whole generation batch.
PER_MICRO_BATCH_LOSSES = ("grpo", "bnpo", "dr_grpo", "sapo", "luspo")
ROWS_PER_DEVICE = 8  # two groups of four per micro-batch
NUM_PROMPTS = 16


def digit_reward(completions, **kwargs):
    """Varies within a group (the tagged backend numbers its completions), so advantages are not all zero."""
    return [float(completion[-1]) for completion in completions]


class UnreachableScorer:
    """`digit_reward`, except that its calls numbered in ``failing`` (0, 1, ...) raise `ConnectionError`: with
    ``reward_retries=0`` the rows of those scorings are unscored."""

    __name__ = "digit_reward"

    def __init__(self, failing: frozenset[int]) -> None:
        self.failing, self.calls = failing, 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls - 1 in self.failing:
            raise ConnectionError("the scorer is unreachable")
        return digit_reward(completions)


class RecordingTrainer(MaxEntGRPOTrainer):
    """Records each optimizer window: its micro-batches, parameters before/after, gradient, optimizer state."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.windows: list[dict] = []
        self._micro_batches: list[dict] = []

    def _plan_of(self, start, prepared):
        self._micro_batches = [  # the window's micro-batches, an empty window's included
            {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in micro_batch.items()}
            for micro_batch in prepared
        ]
        return super()._plan_of(start, prepared)

    def create_optimizer(self, *args, **kwargs):
        optimizer = super().create_optimizer(*args, **kwargs)
        optimizer.register_step_pre_hook(self._before_step)  # runs after the trainer's own pre-hook
        optimizer.register_step_post_hook(self._after_step)
        return optimizer

    def _named(self, optimizer):
        names = {id(p): n for n, p in self.model.named_parameters()}
        return [(names[id(p)], p) for group in optimizer.param_groups for p in group["params"]]

    def _before_step(self, optimizer, args, kwargs):
        named = self._named(optimizer)
        self.windows.append(
            {
                "micro_batches": self._micro_batches,
                "before": {n: p.detach().clone() for n, p in named},
                "grads": {n: None if p.grad is None else p.grad.detach().clone() for n, p in named},
                "optimizer_state": copy.deepcopy(optimizer.state_dict()),
                "optimizer_class": type(optimizer),
                "param_groups": [
                    (
                        {k: v for k, v in group.items() if k != "params"},
                        [n for n, p in named if any(p is q for q in group["params"])],
                    )
                    for group in optimizer.param_groups
                ],
            }
        )
        self._micro_batches = []

    def _after_step(self, optimizer, args, kwargs):
        self.windows[-1]["after"] = {n: p.detach().clone() for n, p in self._named(optimizer)}


PROMPTS = [f"p{i}:" for i in range(NUM_PROMPTS)]
#: Backend faults per scenario: "partial" empties the 2nd, 3rd and 6th group of every generation call; "generation"
#: every group of the second call (the window's second generation batch when steps_per_generation is below
#: gradient_accumulation_steps, else the next window's).
DROPS = {
    "none": {},
    "partial": {"empty_positions": frozenset({1, 2, 5})},
    "generation": {"empty_calls": frozenset({1})},
    "full": {"dropped": frozenset(PROMPTS)},
    "unscored": {"failing_scorings": frozenset({1})},
    "unscored_full": {"failing_scorings": frozenset(range(8))},
}
#: (steps_per_generation, gradient_accumulation_steps): below, equal to and above.
LAYOUTS = {"spg_below_ga": (1, 2), "spg_equals_ga": (2, 2), "spg_above_ga": (4, 2)}


def _importance_sampling_level(loss_type: str) -> str:
    return "sequence" if loss_type == "luspo" else "token"  # TRL requires sequence-level ratios for LUSPO


def _build(
    tmp_path,
    *,
    loss_type,
    steps_per_generation,
    gradient_accumulation_steps,
    dropped=frozenset(),
    empty_positions=frozenset(),
    empty_calls=frozenset(),
    failing_scorings=frozenset(),
    max_steps=1,
    model_path=None,
    backend_class=TaggedBackend,
    **extra,
) -> RecordingTrainer:
    model, tokenizer = tiny_model_and_tokenizer()
    if model_path is not None:  # a reference model (beta > 0) is loaded by name
        model = str(model_path)
    backend = backend_class(tokenizer, empty_prompts=dropped, empty_positions=empty_positions, empty_calls=empty_calls)
    overrides = {
        "loss_type": loss_type,
        "importance_sampling_level": _importance_sampling_level(loss_type),
        "per_device_train_batch_size": ROWS_PER_DEVICE,
        "steps_per_generation": steps_per_generation,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "max_steps": max_steps,
        "generation_max_retries": 0,
        "generation_max_consecutive_empty_batches": 100,
        "max_grad_norm": 0.0,  # no clipping: the comparison is of raw gradients
        "learning_rate": 1e-3,
        "reward_retries": 0,
    }
    overrides.update(extra)
    return RecordingTrainer(
        model=model,
        reward_funcs=UnreachableScorer(failing_scorings) if failing_scorings else digit_reward,
        args=tiny_config(tmp_path, **overrides),
        train_dataset=letter_dataset(NUM_PROMPTS),
        processing_class=tokenizer,
        generation_backend=backend,
    )


def _train(tmp_path, *, dropped=frozenset(), **settings) -> RecordingTrainer:
    trainer = _build(tmp_path, dropped=dropped, **settings)
    if dropped == DROPS["full"]["dropped"]:  # nothing to train on: the run says so once it ends
        with pytest.raises(NoUsableGenerationError):
            trainer.train()
    elif settings.get("failing_scorings") == DROPS["unscored_full"]["failing_scorings"]:  # nor here
        with pytest.raises(NoUsableGenerationError, match="no reward function could score their rows"):
            trainer.train()
    else:
        trainer.train()
    return trainer


def _keep(micro_batch):
    """Kept rows, told apart as TRL sees them: a dropped row's tool mask starts with 0 (no mask: all rows are kept); a
    row that scoring left out is a real completion, marked only in the trainer's keep column."""
    tool_mask = micro_batch.get("tool_mask")
    keep = torch.ones(micro_batch["completion_ids"].shape[0], dtype=torch.bool)
    if tool_mask is not None:
        keep &= tool_mask[:, 0] > 0
    return keep & micro_batch[ROW_KEEP_KEY]


def _kept_only(micro_batch):
    rows = _keep(micro_batch).nonzero().flatten()
    return {
        key: value.index_select(0, rows) if torch.is_tensor(value) and value.ndim > 0 else value
        for key, value in micro_batch.items()
    }


def _reference_gradient(trainer, window):
    """Stock TRL's loss on the kept rows alone, on a copy of the weights, with what holds nothing left out of TRL's
    averages (see the module docstring): TRL divided each micro-batch's term by the window's micro-batches, M.

    The policy term and the entropy bonus may need different factors (dapo with a micro-batch without kept rows in a
    generation batch with data). TRL's fused log-prob / entropy backward is not exactly linear in the weights of the
    two terms, so they are not differentiated apart: the bonus's coefficient carries the ratio of the two factors and
    the loss the policy's, as one TRL loss.
    """
    reference = copy.deepcopy(trainer.model)
    reference.load_state_dict(window["before"], strict=False)
    reference.train()
    micro_batches = window["micro_batches"]
    kept = [mb for mb in micro_batches if bool(_keep(mb).any())]
    with_tokens = [mb for mb in micro_batches if bool(mb["num_items_in_batch"] > 0)]
    policy_share = len(kept) if trainer.loss_type in PER_MICRO_BATCH_LOSSES else len(with_tokens)
    policy_factor, bonus_factor = len(micro_batches) / policy_share, len(micro_batches) / len(kept)
    coefficient = trainer.entropy_coef
    trainer.entropy_coef = coefficient * bonus_factor / policy_factor
    try:
        for micro_batch in kept:
            (GRPOTrainer._compute_loss(trainer, reference, _kept_only(micro_batch)) * policy_factor).backward()
    finally:
        trainer.entropy_coef = coefficient
    return reference, {n: p.grad for n, p in reference.named_parameters() if n in window["before"]}


def _relative_error(actual, expected):
    a = torch.cat([t.flatten() for t in actual])
    e = torch.cat([t.flatten() for t in expected])
    return ((a - e).norm() / e.norm().clamp(min=1e-30)).item()


def _check_window(trainer, window):
    names = list(window["before"])
    kept = sum(int(_keep(mb).sum()) for mb in window["micro_batches"])
    if kept == 0:
        for name in names:
            assert torch.equal(window["after"][name], window["before"][name]), f"{name} moved without a kept row"
        return 0.0, 0.0
    reference, expected = _reference_gradient(trainer, window)
    actual = [window["grads"][n] if window["grads"][n] is not None else torch.zeros_like(expected[n]) for n in names]
    gradient_error = _relative_error(actual, [expected[n] for n in names])

    params = [reference.get_parameter(n) for n in names]
    optimizer = window["optimizer_class"](
        [{**group, "params": [reference.get_parameter(n) for n in group_names]}
         for group, group_names in window["param_groups"]]
    )  # fmt: skip
    optimizer.load_state_dict(window["optimizer_state"])
    optimizer.step()
    update = [window["after"][n] - window["before"][n] for n in names]
    expected_update = [p.detach() - window["before"][n] for n, p in zip(names, params, strict=True)]
    return gradient_error, _relative_error(update, expected_update)


# ------------------------------------------------------------------------------------------- replayed windows
def _configure(trainer: MaxEntGRPOTrainer, loss_type: str, entropy_coef: float) -> None:
    """Set ``trainer`` up as one built for ``loss_type`` and ``entropy_coef``: the config fields and the attributes
    TRL's `GRPOTrainer.__init__` derives from them, which its loss reads when it runs (see
    `test_a_reconfigured_trainer_is_one_built_for_its_cell`)."""
    level = _importance_sampling_level(loss_type)
    args = trainer.args
    args.loss_type, args.importance_sampling_level, args.entropy_coef = loss_type, level, entropy_coef
    trainer.loss_type, trainer.importance_sampling_level, trainer.entropy_coef = loss_type, level, entropy_coef
    trainer._entropy_bonus_enabled = entropy_coef != 0.0 or trainer.use_adaptive_entropy  # as TRL's __init__


def _replay(trainer: RecordingTrainer, window: dict, *, loss_type: str, entropy_coef: float) -> tuple[dict, dict]:
    """``window`` trained again by ``trainer`` set up for ``loss_type`` and ``entropy_coef``, from the weights and
    optimizer state recorded before its step, the way `Trainer.train()` trains a window: the trainer's own
    `training_step` on each micro-batch (its planner plans the window with `_plan_of`; `_compute_loss` applies the
    keep mask and the window factors; an empty window's backward is skipped), then its optimizer's step. Only the
    generation is replaced, by the window's recorded micro-batches. Returns the new recording and the log entry TRL
    makes of the replay's metrics, with the sum of the micro-batches' losses (what the Trainer logs for one step)."""
    _configure(trainer, loss_type, entropy_coef)
    micro_batches = window["micro_batches"]
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            param.copy_(window["before"][name])
    trainer.optimizer.load_state_dict(window["optimizer_state"])
    trainer.model.zero_grad()
    start, size = trainer._step, len(micro_batches)
    trainer._windows = WindowPlanner(lambda _inputs, step: micro_batches[step - start], trainer._plan_of)
    trainer._windows.start(start, [{}] * size)  # as `get_batch_samples` starts a window
    trainer.current_gradient_accumulation_steps = size
    recorded, loss = len(trainer.windows), 0.0
    for offset in range(size):
        trainer.accelerator.gradient_state._set_sync_gradients(offset == size - 1)  # as the Trainer's loop
        loss += trainer.training_step(trainer.model, {}, None).item()
    trainer.optimizer.step()
    trainer.model.zero_grad()
    assert len(trainer.windows) == recorded + 1, "the replay made one optimizer step"
    trainer.log({"loss": loss})
    return trainer.windows[-1], trainer.state.log_history[-1]


@dataclasses.dataclass
class Training:
    """One real training of this module, shared by the cells that replay its windows."""

    trainer: RecordingTrainer
    loss_type: str
    entropy_coef: float
    windows: list[dict]  # as `Trainer.train()` recorded them
    log_history: list[dict]

    def run_as(self, loss_type: str, entropy_coef: float) -> tuple[list[dict], list[dict]]:
        """The windows and log entries of the cell (``loss_type``, ``entropy_coef``): this training's own if it is
        the cell trained, else each window's replay. Either way the trainer is left set up for the cell."""
        if (loss_type, entropy_coef) == (self.loss_type, self.entropy_coef):
            _configure(self.trainer, loss_type, entropy_coef)  # back from another cell's replay
            return self.windows, self.log_history
        replays = [_replay(self.trainer, w, loss_type=loss_type, entropy_coef=entropy_coef) for w in self.windows]
        return [window for window, _ in replays], [entry for _, entry in replays]


@pytest.fixture(scope="module")
def shared_training(tmp_path_factory) -> Callable[..., Training]:
    """``shared_training(name, loss_type=..., entropy_coef=..., **settings)``: `_train` with those settings, run once
    in this module under ``name``."""
    trainings: dict[str, Training] = {}

    def training(name: str, *, loss_type: str, entropy_coef: float, **settings: Any) -> Training:
        if name not in trainings:
            output_dir = tmp_path_factory.mktemp("shared-training")
            trainer = _train(output_dir, loss_type=loss_type, entropy_coef=entropy_coef, **settings)
            log_history = copy.deepcopy(trainer.state.log_history)
            trainings[name] = Training(trainer, loss_type, entropy_coef, list(trainer.windows), log_history)
        return trainings[name]

    return training


def _settings(trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
    """The trainer's plain attributes (numbers, strings, flags) and its config's fields."""
    plain = (bool, int, float, str, type(None))
    attributes = {name: value for name, value in vars(trainer).items() if isinstance(value, plain)}
    return {**attributes, **{f"args.{name}": value for name, value in trainer.args.to_dict().items()}}


def test_a_reconfigured_trainer_is_one_built_for_its_cell(tmp_path: Path) -> None:
    # The replays' premise: a trainer built for one (loss type, entropy) cell and then `_configure`d for another holds
    # exactly the settings of a trainer built for that other cell. Every loss type, both entropy settings.
    def built(loss_type: str, entropy_coef: float) -> RecordingTrainer:
        return _build(
            tmp_path,
            loss_type=loss_type,
            steps_per_generation=2,
            gradient_accumulation_steps=2,
            entropy_coef=entropy_coef,
        )

    reconfigured = built("grpo", 0.0)
    for loss_type, entropy_coef in zip(LOSS_TYPES, itertools.cycle((0.01, 0.0)), strict=False):
        target = _settings(built(loss_type, entropy_coef))
        assert _settings(reconfigured) != target  # each cell differs from the last in what is compared
        _configure(reconfigured, loss_type, entropy_coef)
        assert _settings(reconfigured) == target, (loss_type, entropy_coef)


#: Every (layout, drop): a dropped second generation call (or second scoring) is the window's second generation batch
#: only below.
MATRIX = [
    (layout, drop)
    for layout in LAYOUTS
    for drop in DROPS
    if drop not in ("generation", "unscored") or layout == "spg_below_ga"
]
#: The (loss type, entropy coefficient) cell each (layout, drop) trains for real; its other cells replay that window.
#: Every loss type and both entropy settings train for real somewhere.
TRAINED_AS = {
    ("spg_below_ga", "none"): ("grpo", 0.0),
    ("spg_below_ga", "partial"): ("sapo", 0.01),
    ("spg_below_ga", "generation"): ("dapo", 0.01),  # the loss factor M / K and the bonus's P * M / U
    ("spg_below_ga", "full"): ("luspo", 0.0),
    ("spg_equals_ga", "none"): ("dr_grpo", 0.01),
    ("spg_equals_ga", "partial"): ("bnpo", 0.0),
    ("spg_equals_ga", "full"): ("vespo", 0.01),
    ("spg_above_ga", "none"): ("cispo", 0.0),
    ("spg_above_ga", "partial"): ("luspo", 0.01),
    ("spg_above_ga", "full"): ("grpo", 0.01),
    ("spg_below_ga", "unscored"): ("cispo", 0.01),
    ("spg_below_ga", "unscored_full"): ("bnpo", 0.01),
    ("spg_equals_ga", "unscored_full"): ("dapo", 0.0),
    ("spg_above_ga", "unscored_full"): ("sapo", 0.0),
}


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
@pytest.mark.parametrize(("layout", "drop"), MATRIX)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_update_equals_that_of_the_kept_rows_alone(shared_training, loss_type, layout, drop, entropy_coef):
    steps_per_generation, gradient_accumulation_steps = LAYOUTS[layout]
    trained_loss_type, trained_entropy_coef = TRAINED_AS[layout, drop]
    training = shared_training(
        f"matrix/{layout}/{drop}",
        loss_type=trained_loss_type,
        entropy_coef=trained_entropy_coef,
        **DROPS[drop],
        steps_per_generation=steps_per_generation,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    windows, log_history = training.run_as(loss_type, entropy_coef)
    trainer = training.trainer
    assert len(windows) == 1
    (window,) = windows
    assert len(window["micro_batches"]) == gradient_accumulation_steps
    keep = [_keep(mb) for mb in window["micro_batches"]]
    whole = torch.cat(keep)
    emptied = [not bool(k.any()) for k in keep]  # micro-batches of the window without a kept row
    assert {
        "none": whole.all(),
        "partial": whole.any() and not whole.all(),
        "generation": emptied == [False, True],
        "full": not whole.any(),
        "unscored": emptied == [False, True],
        "unscored_full": not whole.any(),
    }[drop]
    if drop.startswith("unscored"):  # real completions (no placeholder), left out by scoring only
        for micro_batch, kept in zip(window["micro_batches"], keep, strict=True):
            assert micro_batch.get("tool_mask") is None  # no row was dropped by generation
            assert bool((micro_batch["advantages"][~kept] == 0).all())
            if layout == "spg_below_ga":  # one micro-batch per generation batch: TRL's token count of kept rows only
                assert int(micro_batch["num_items_in_batch"]) == int(micro_batch["completion_mask"][kept].sum())
    gradient_error, update_error = _check_window(trainer, window)
    assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)
    for entry in log_history:
        for key, value in entry.items():
            assert not (isinstance(value, float) and math.isnan(value)), key


@pytest.mark.parametrize("drop", ["partial", "generation"])
@pytest.mark.parametrize("layout", ["spg_below_ga", "spg_equals_ga"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_reused_generation_batches_num_iterations_two(tmp_path, loss_type, layout, drop):
    # Each generation batch trains twice (TRL's num_iterations): windows may hold the same generation batch twice,
    # and with the second generation call dropped the second window holds nothing.
    steps_per_generation, gradient_accumulation_steps = LAYOUTS[layout]
    trainer = _train(
        tmp_path,
        loss_type=loss_type,
        **DROPS[drop],
        steps_per_generation=steps_per_generation,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_iterations=2,
        max_steps=2,
        entropy_coef=0.01,
    )
    assert len(trainer.windows) == 2
    for window in trainer.windows:
        gradient_error, update_error = _check_window(trainer, window)
        assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)


@pytest.mark.parametrize("gradient_accumulation_steps", [1, 2])
@pytest.mark.parametrize("steps_per_generation", [1, 4])
@pytest.mark.parametrize("drop", ["none", "partial", "full"])
def test_listwise_policy_mode_probabilities_leave_dropped_rows_out(
    tmp_path, drop, steps_per_generation, gradient_accumulation_steps
):
    # The listwise objective with the policy correction over the same matrix: its log-probs come from its own forward
    # (steps_per_generation 1) or from TRL's old_per_token_logps (4); placeholder rows never get an advantage, and
    # the update is still that of the kept rows alone.
    trainer = _train(
        tmp_path,
        loss_type="dapo",
        **DROPS[drop],
        steps_per_generation=steps_per_generation,
        gradient_accumulation_steps=gradient_accumulation_steps,
        maxent_objective="listwise",
        maxent_mode_key="last_line",
        maxent_mode_probability="policy",
        maxent_tau=0.0,
        maxent_tau_final=None,
    )
    (window,) = trainer.windows
    advantages = torch.cat([mb["advantages"].flatten() for mb in window["micro_batches"]])
    keep = torch.cat([_keep(mb) for mb in window["micro_batches"]])
    assert (advantages[~keep] == 0).all()
    if drop != "full":
        assert advantages[keep].abs().max().item() > 1e-3
    gradient_error, update_error = _check_window(trainer, window)
    assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)


def test_a_step_without_kept_rows_moves_nothing_even_with_weight_decay(tmp_path):
    # One group of four survives, 4 micro-batches of 4 rows per generation batch: some optimizer step gets no kept
    # row although the generation batch as a whole has data (TRL's num_items_in_batch > 0).
    trainer = _train(
        tmp_path,
        loss_type="dapo",
        empty_positions=frozenset({1, 2, 3}),
        per_device_train_batch_size=4,
        steps_per_generation=4,
        gradient_accumulation_steps=1,
        max_steps=4,
        weight_decay=0.1,
    )
    kept = [sum(int(_keep(mb).sum()) for mb in w["micro_batches"]) for w in trainer.windows]
    assert 0 in kept and any(kept), f"kept rows per step {kept}: need a step without and one with kept rows"
    for window in trainer.windows:
        gradient_error, update_error = _check_window(trainer, window)
        assert gradient_error <= 1e-6 and update_error <= 1e-6


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_kept_rows_alone_with_kl_entropy_quantile_and_entropy_bonus(shared_training, tiny_model_dir, loss_type):
    # grpo trains for real; dr_grpo and dapo replay its two windows (see the module docstring).
    training = shared_training(
        "kl, entropy quantile and entropy bonus",
        loss_type="grpo",
        entropy_coef=0.01,  # a static bonus: the reference applies the same one
        **DROPS["partial"],
        steps_per_generation=2,
        gradient_accumulation_steps=2,
        max_steps=2,
        model_path=tiny_model_dir,
        beta=0.1,
        top_entropy_quantile=0.5,
    )
    windows, log_history = training.run_as(loss_type, 0.01)
    assert len(windows) == 2
    for window in windows:
        gradient_error, update_error = _check_window(training.trainer, window)
        assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)
    assert all(math.isfinite(v) for v in (e.get("kl", 0.0) for e in log_history) if v is not None)


class FailingAfterFirstCall(TaggedBackend):
    def generate(self, prompts, counts):
        if self.calls:
            self.always_fail = True
        return super().generate(prompts, counts)


def test_a_skipped_optimizer_step_does_not_carry_its_data_into_the_next_window(tmp_path):
    # Accelerate skips `optimizer.step` on an fp16 overflow; emulated here for the first step, which has data. The
    # second step has no kept row and, with weight decay, must still move nothing.
    model, tokenizer = tiny_model_and_tokenizer()

    class SkipsFirstStep(RecordingTrainer):
        def create_optimizer(self, *args, **kwargs):
            optimizer = super().create_optimizer(*args, **kwargs)
            step = optimizer.step
            calls = []

            def skip_first(*step_args, **step_kwargs):
                calls.append(1)
                return None if len(calls) == 1 else step(*step_args, **step_kwargs)

            optimizer.step = skip_first
            return optimizer

    trainer = SkipsFirstStep(
        model=model,
        reward_funcs=digit_reward,
        args=tiny_config(
            tmp_path,
            max_steps=2,
            per_device_train_batch_size=8,
            generation_max_retries=0,
            generation_max_consecutive_empty_batches=5,
            weight_decay=0.1,
        ),
        train_dataset=letter_dataset(NUM_PROMPTS),
        processing_class=tokenizer,
        generation_backend=FailingAfterFirstCall(tokenizer),
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    for name, param in trainer.model.named_parameters():
        assert torch.equal(param.detach(), before[name]), f"{name} moved"


#: One group of four kept per generation batch of 16 rows, shuffled by TRL into 4 micro-batches of 4, two per window:
#: with this seed both windows hold a micro-batch without a kept row beside one with, in a generation batch with data.
#: dapo's policy term then counts both micro-batches (its normaliser is the generation batch's) and its entropy bonus
#: only one (a per-micro-batch mean): the two get different factors.
UNEVEN_WINDOWS = {
    "loss_type": "dapo",
    "empty_positions": frozenset({1, 2, 3}),
    "per_device_train_batch_size": 4,
    "steps_per_generation": 4,
    "gradient_accumulation_steps": 2,
    "max_steps": 2,
    "seed": 2,
}


def _uneven(window) -> bool:
    kept = [bool(_keep(mb).any()) for mb in window["micro_batches"]]
    return any(kept) and not all(kept)


def test_the_entropy_bonus_of_a_token_normalised_loss_counts_only_micro_batches_with_data(tmp_path):
    trainer = _train(tmp_path, **UNEVEN_WINDOWS, entropy_coef=0.01)
    assert len(trainer.windows) == 2 and all(map(_uneven, trainer.windows))
    for window in trainer.windows:
        gradient_error, update_error = _check_window(trainer, window)
        assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)


def test_adaptive_entropy_control_moves_the_unscaled_coefficient(tmp_path):
    # The coefficient is scaled inside the loss (see UNEVEN_WINDOWS); TRL's adaptive control must still move, and
    # log, the coefficient it was given. TRL applies no bonus before its first entropy measurement, so the second
    # window is the one whose gradient is checked.
    trainer = _train(
        tmp_path,
        **UNEVEN_WINDOWS,
        entropy_coef=0.01,
        use_adaptive_entropy=True,
        entropy_target=100.0,  # above any entropy: the bonus applies and the coefficient goes up by one delta a step
        entropy_coef_delta=0.002,
    )
    assert all(map(_uneven, trainer.windows))
    assert trainer.entropy_coef == pytest.approx(0.014)
    logged = [entry["entropy_coef"] for entry in trainer.state.log_history if "entropy_coef" in entry]
    assert logged == [pytest.approx(0.012), pytest.approx(0.014)]
    trainer.use_adaptive_entropy, trainer.entropy_coef = False, 0.012  # the reference: the coefficient that applied
    gradient_error, update_error = _check_window(trainer, trainer.windows[1])
    assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)


class TruncatingBackend(TaggedBackend):
    """Completions without their EOS: TRL sees every one as truncated."""

    def _completion(self, prompt):
        completion = super()._completion(prompt)
        ids = completion.completion_ids[:-1]
        logprobs = None if completion.logprobs is None else completion.logprobs[:-1]
        return Completion(
            text=completion.text, prompt_ids=completion.prompt_ids, completion_ids=ids, logprobs=logprobs
        )


@pytest.mark.parametrize("loss_type", ["dapo", "cispo", "vespo", "grpo"])
def test_a_window_of_masked_truncated_completions_trains_on_nothing_without_failing(shared_training, loss_type):
    # Kept rows, but `mask_truncated_completions` masks every token: TRL's token count is 0 for the whole window.
    # dapo trains for real; the other loss types replay its window (see the module docstring).
    training = shared_training(
        "masked truncated completions",
        loss_type="dapo",
        entropy_coef=0.0,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        mask_truncated_completions=True,
        backend_class=TruncatingBackend,
    )
    (window,), log_history = training.run_as(loss_type, 0.0)
    assert all(bool(mb["num_items_in_batch"] == 0) for mb in window["micro_batches"])
    assert all(math.isfinite(entry["loss"]) for entry in log_history if "loss" in entry)


class SlowBackend(TaggedBackend):
    """Every call takes at least `seconds` (generation that TRL's step timer must include)."""

    seconds = 0.3

    def generate(self, prompts, counts):
        time.sleep(self.seconds)
        return super().generate(prompts, counts)


def test_step_time_includes_the_window_generation_and_empty_windows_log_it_too(tmp_path):
    # The window's generation batches run at its first micro-batch, inside TRL's step timer; the second window's
    # generation calls are dropped whole, so that step trains on nothing but still takes (and logs) its time.
    trainer = _train(
        tmp_path,
        loss_type="dapo",
        steps_per_generation=1,
        gradient_accumulation_steps=2,
        max_steps=2,
        empty_calls=frozenset({2, 3}),
        backend_class=SlowBackend,
    )
    step_times = [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry]
    assert len(step_times) == 2
    assert all(seconds >= 2 * SlowBackend.seconds for seconds in step_times), step_times  # two calls per window


class ToolMaskedBackend(TaggedBackend):
    """The tagged backend, each completion's middle tokens marked as tool results (``tool_mask`` 0)."""

    def _completion(self, prompt):
        completion = super()._completion(prompt)
        length = len(completion.completion_ids)
        return dataclasses.replace(completion, tool_mask=[1] + [0] * (length - 2) + [1])


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_tool_masks_and_drops_together_equal_the_kept_rows_alone(shared_training, loss_type):
    """Dropped rows and tool-result tokens are both kept out: the update is TRL's on the kept rows' model tokens.

    grpo trains for real; dapo and dr_grpo replay its window (see the module docstring)."""
    training = shared_training(
        "tool masks",
        loss_type="grpo",
        entropy_coef=0.0,
        **DROPS["partial"],
        steps_per_generation=2,
        gradient_accumulation_steps=2,
        backend_class=ToolMaskedBackend,
    )
    (window,), _ = training.run_as(loss_type, 0.0)
    loss_masks = torch.cat([mb["tool_mask"] * mb["completion_mask"] for mb in window["micro_batches"]])
    masks = torch.cat([mb["tool_mask"] for mb in window["micro_batches"]])
    kept = torch.cat([_keep(mb) for mb in window["micro_batches"]])
    assert kept.any() and not kept.all()
    assert not bool(loss_masks[~kept].any())  # no token of a dropped row is trained on
    assert bool((masks[kept][:, 1] == 0).all())  # a kept row keeps its own tool mask
    gradient_error, update_error = _check_window(training.trainer, window)
    assert gradient_error <= 1e-6 and update_error <= 1e-6, (gradient_error, update_error)
