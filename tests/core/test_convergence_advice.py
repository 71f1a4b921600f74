"""The red convergence line says what it means for the reader and what to do (issue 47, item 9):
a recorded R̂ of 1.3 gets the sentence with its action, 1.005 gets none."""

from __future__ import annotations

from core.engine.naming import convergence_advice, convergence_warning


def _record(rhat: float, **extra) -> dict:
    return {"diagnostics": {"status": "measured", "chains": 4, "draws": 250, "rhat_max": rhat, **extra}}


def test_chains_that_disagree_get_what_it_means_and_what_to_do() -> None:
    info = _record(1.3, rhat_max_shuffled=1.02, rhat_above_1_01=0.9, rhat_above_1_01_shuffled=0.01)
    assert convergence_warning(info).startswith("The chains disagree")
    advice = convergence_advice(info)
    assert "read its spread as a rough guess" in advice  # what it means for the reader
    assert "longer run" in advice  # what to do
    assert "to trust" not in advice  # no column named where none was given


def test_converged_chains_and_files_without_a_record_get_no_words() -> None:
    assert convergence_advice(_record(1.005)) is None
    assert convergence_advice(_record(1.09)) is None  # at most 1.1: no red line, so nothing to explain
    assert convergence_advice({}) is None
    assert convergence_advice({"diagnostics": {"status": "n/a", "reason": "one chain"}}) is None


def test_too_few_draws_to_tell_asks_for_more_draws_not_a_verdict() -> None:
    # chains as far apart as their own draws shuffled: the draws cannot tell (see within_shuffled)
    info = _record(1.18, rhat_max_shuffled=1.17, rhat_above_1_01=0.39, rhat_above_1_01_shuffled=0.52)
    assert convergence_warning(info).startswith("Too few draws to tell")
    advice = convergence_advice(info)
    assert "rough guess" in advice and "more draws per chain" in advice and "longer run" not in advice


def test_a_converged_reference_of_the_same_set_is_named_as_the_one_to_trust() -> None:
    info = _record(1.3)
    advice = convergence_advice(info, trusted="Exact inference (HMC)")
    assert advice.endswith("Exact inference (HMC) is the column to trust here.")
