"""Issue 35, item 3: the sequential sentence prints the statistic its decision used (the
running maximum of the e-process), survival tests catch their warnings and say them in one
line, and what cannot be estimated says "not estimable" instead of +0.000 [+0.000, +0.000]."""

from __future__ import annotations

import warnings

import numpy as np
from helpers.run_tables import pair_tables

from steplog.compare import compare_tables, sequential_verdict
from steplog.stats import hazard
from steplog.stats.sequential import confidence_sequence


def test_the_sentence_prints_the_running_maximum_the_decision_used() -> None:
    # ten wins, then twenty pairs that give them back: decided early (the e-process passed
    # 1/alpha = 20 at its peak), its current value far below 20
    cs = confidence_sequence([1] * 10 + [0, -1] * 10)
    assert cs.decided == "candidate better"
    assert cs.e_value_max is not None and cs.e_value_max >= 20 > 1 > cs.e_value
    sentence = sequential_verdict(cs)
    assert sentence.startswith("candidate better")
    assert (
        f"running maximum e-value against no difference, {cs.e_value_max:.3g} >= 1/alpha = 20"
        in (sentence)
    )
    assert f"now {cs.e_value:.3g}" in sentence
    undecided = sequential_verdict(confidence_sequence([1, 0, -1, 0] * 5))
    assert undecided.startswith("undecided") and "< 1/alpha = 20" in undecided


def test_no_failure_logrank_is_not_estimable_and_quiet() -> None:
    base, cand = pair_tables([(3, 3, 3)] * 8)  # every run completes: nothing failed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a leaked RuntimeWarning fails the test
        report = compare_tables(base, cand).as_dict()
    logrank = report["survival"]["logrank"]
    assert logrank["p_value"] is None and logrank["note"].startswith("not estimable")
    assert logrank["warning"] is None or "\n" not in logrank["warning"]


def test_the_cli_says_not_estimable_and_the_warning_in_one_line() -> None:
    from steplog.cli._shared import console
    from steplog.cli.compare import _print_report

    base, cand = pair_tables([(3, 3, 3)] * 8)
    with console.capture() as captured:
        _print_report(compare_tables(base, cand).as_dict(), as_json=False)
    text = captured.get()
    assert "do the survival curves differ? not estimable" in text
    assert "p=nan" not in text and "+0.000 [+0.000, +0.000]" not in text
    assert "hazard trend per step: not estimable" in text


def test_step_less_runs_have_no_hazard_trend() -> None:
    # every run ended at its first step (no steps recorded): nothing estimates a slope
    steps = np.ones(40, dtype=np.int64)
    failed = np.arange(40) % 3 == 0
    trend = hazard.discrete_hazard_trend(
        steps, failed, np.zeros(40, dtype=np.intp), np.arange(40) // 4
    )
    assert trend is None
