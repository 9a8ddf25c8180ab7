"""The tau / beta controllers and the tau anneal: update rules, clamps, warm-up, JSON state and bad arguments."""

from __future__ import annotations

import json
import math

import pytest

from maxent_grpo.objective.controllers import BetaController, TauController, annealed_tau

E = math.e

# --- tau controller --------------------------------------------------------------------------------------------------


def tau_controller(**overrides: object) -> TauController:
    arguments: dict[str, object] = {
        "tau": 1.0,
        "target_entropy": 1.0,
        "lr": 0.5,
        "tau_min": 0.01,
        "tau_max": 100.0,
        "warmup_steps": 0,
        "ema": 0.0,
        **overrides,
    }
    return TauController(**arguments)  # type: ignore[arg-type]


def test_low_entropy_raises_tau_and_high_entropy_lowers_it() -> None:
    assert tau_controller().update(0.2) == pytest.approx(math.exp(0.5 * 0.8))
    assert tau_controller().update(1.6) == pytest.approx(math.exp(-0.5 * 0.6))


def test_tau_follows_the_moving_average() -> None:
    controller = tau_controller(lr=1.0, ema=0.5)
    assert controller.update(0.0) == pytest.approx(E)  # average starts at the first measurement: 0
    assert controller.update(1.0) == pytest.approx(E**1.5)  # average 0.5 * 0 + 0.5 * 1 = 0.5
    assert controller.state_dict() == {"tau": pytest.approx(E**1.5), "ema_entropy": 0.5, "step": 2}


def test_tau_waits_for_warmup() -> None:
    controller = tau_controller(warmup_steps=2)
    assert controller.update(0.0) == 1.0
    assert controller.update(0.0) == 1.0
    assert controller.update(0.0) == pytest.approx(math.exp(0.5))


def test_tau_is_clamped() -> None:
    assert tau_controller(lr=100.0).update(0.0) == 100.0
    assert tau_controller(lr=100.0).update(50.0) == 0.01


def test_tau_is_fixed_without_target() -> None:
    controller = tau_controller(target_entropy=None, tau=0.0)
    for _ in range(3):
        assert controller.update(0.0) == 0.0
    assert controller.state_dict()["step"] == 3


def test_annealed_tau_goes_geometrically_from_start_to_final() -> None:
    assert annealed_tau(1.0, 0.01, 0.0) == 1.0
    assert annealed_tau(1.0, 0.01, 0.5) == pytest.approx(0.1)
    assert annealed_tau(1.0, 0.01, 1.0) == pytest.approx(0.01)
    assert annealed_tau(1.0, 0.01, 7.0) == pytest.approx(0.01)  # past the end: stays at the final value
    assert annealed_tau(0.2, 0.2, 0.3) == pytest.approx(0.2)
    values = [annealed_tau(2.0, 0.05, step / 10) for step in range(11)]
    assert values == sorted(values, reverse=True)
    for bad in [(0.0, 0.1, 0.5), (1.0, 0.0, 0.5), (1.0, 0.1, math.nan)]:
        with pytest.raises(ValueError):
            annealed_tau(*bad)


def test_tau_state_round_trips_through_json() -> None:
    controller = tau_controller(ema=0.9, warmup_steps=1)
    for measured in (0.3, 0.5, 0.1):
        controller.update(measured)
    restored = tau_controller(ema=0.9, warmup_steps=1)
    restored.load_state_dict(json.loads(json.dumps(controller.state_dict())))
    assert restored.state_dict() == controller.state_dict()
    assert restored.update(0.4) == controller.update(0.4)


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"tau": -1.0}, "tau"),
        ({"tau": 0.0}, "tau"),
        ({"tau": 500.0}, "tau"),
        ({"target_entropy": -0.1}, "target_entropy"),
        ({"lr": 0.0}, "lr"),
        ({"tau_min": -1.0}, "tau_min"),
        ({"tau_max": 0.001}, "tau_max"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"warmup_steps": 1.5}, "warmup_steps"),
        ({"ema": 1.0}, "ema"),
    ],
)
def test_tau_controller_rejects_bad_arguments(overrides: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}=.*expected"):
        tau_controller(**overrides)


def test_tau_controller_rejects_non_finite_measurements() -> None:
    with pytest.raises(ValueError, match=r"^measured_entropy=nan"):
        tau_controller().update(float("nan"))


# --- beta controller -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("measured_kl", "n_steps", "expected"),
    [
        (0.1, 1, 0.1 * (1 + 0.2 / 10)),  # KL twice the target: error clipped to +0.2
        (0.04, 1, 0.1 * (1 - 0.2 / 10)),  # KL below target: error clipped to -0.2
        (0.055, 1, 0.1 * (1 + 0.1 / 10)),  # error 0.055 / 0.05 - 1 = 0.1, inside the clip
        (0.1, 5, 0.1 * (1 + 0.2 * 5 / 10)),
    ],
)
def test_beta_follows_the_adaptive_kl_rule(measured_kl: float, n_steps: int, expected: float) -> None:
    controller = BetaController(beta=0.1, kl_target=0.05, horizon=10)
    assert controller.update(measured_kl, n_steps=n_steps) == pytest.approx(expected, abs=1e-15)


def test_beta_is_fixed_without_target() -> None:
    controller = BetaController(beta=0.0, kl_target=None, horizon=10)
    assert controller.update(5.0) == 0.0


def test_beta_never_goes_negative() -> None:
    assert BetaController(beta=0.1, kl_target=1.0, horizon=1, step_size=1.0).update(0.0, n_steps=3) == 0.0


def test_beta_state_round_trips_through_json() -> None:
    controller = BetaController(beta=0.1, kl_target=0.05, horizon=10)
    controller.update(0.2)
    restored = BetaController(beta=0.1, kl_target=0.05, horizon=10)
    restored.load_state_dict(json.loads(json.dumps(controller.state_dict())))
    assert restored.update(0.01) == controller.update(0.01)


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"beta": -0.1, "kl_target": None, "horizon": 10}, "beta"),
        ({"beta": 0.0, "kl_target": 0.1, "horizon": 10}, "beta"),
        ({"beta": 0.1, "kl_target": 0.0, "horizon": 10}, "kl_target"),
        ({"beta": 0.1, "kl_target": 0.1, "horizon": 0}, "horizon"),
        ({"beta": 0.1, "kl_target": 0.1, "horizon": 10, "step_size": 0.0}, "step_size"),
        ({"beta": 0.1, "kl_target": 0.1, "horizon": 10, "step_size": 1.5}, "step_size"),
    ],
)
def test_beta_controller_rejects_bad_arguments(arguments: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}=.*expected"):
        BetaController(**arguments)  # type: ignore[arg-type]


def test_beta_controller_rejects_bad_updates() -> None:
    controller = BetaController(beta=0.1, kl_target=0.05, horizon=10)
    with pytest.raises(ValueError, match=r"^n_steps=0"):
        controller.update(0.1, n_steps=0)
    with pytest.raises(ValueError, match=r"^measured_kl=inf"):
        controller.update(math.inf)
