"""Issue 36 through AppTest: rows that open, compare URLs that keep their meaning, the fatal
step first, a missing or unmigrated database said on every page."""

from __future__ import annotations

import pytest
from test_ui import page, seeded, seeded_url

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.store import EventStore
from steplog.ui.common import md, picked_row

__all__ = ["seeded", "seeded_url"]  # fixtures, shared with test_ui


def test_a_picked_cell_or_row_names_the_row() -> None:
    assert picked_row(None) is None
    assert picked_row({"rows": [], "columns": [], "cells": []}) is None
    assert picked_row({"rows": [3], "cells": []}) == 3
    assert picked_row({"rows": [], "cells": [[4, "message"]]}) == 4
    assert picked_row({"rows": [], "cells": [(0, "run_id")]}) == 0


# --- compare links ----------------------------------------------------------------------------

COMPARE_KEYS = {"baseline", "candidate", "scenario", "paired", "alpha"}


def test_compare_url_carries_every_choice_defaults_included(seeded: EventStore) -> None:
    app = page("compare")
    assert not app.exception, app.exception
    assert set(app.query_params) >= COMPARE_KEYS
    assert {k: app.query_params[k] for k in ("paired", "alpha")} == {
        "paired": "auto",
        "alpha": "0.05",
    }
    assert app.query_params["baseline"] != app.query_params["candidate"]
    app.selectbox(key="paired").select("off").run()
    assert app.query_params["paired"] == "off"
    assert set(app.query_params) >= COMPARE_KEYS


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_link_naming_one_version_compares_it_with_another(seeded: EventStore, side: str) -> None:
    for version in ("sim-v1", "sim-v2"):
        app = page("compare", **{side: version})
        assert app.selectbox(key=side).value == version
        assert app.selectbox(key="baseline").value != app.selectbox(key="candidate").value
        assert not app.warning


def test_a_compare_link_keeps_its_meaning_after_a_newer_run(seeded: EventStore) -> None:
    link = {"baseline": "sim-v1", "candidate": "sim-v2", "scenario": "customer-service"}
    before = page("compare", **link)
    spec = get_scenario("customer-service")  # the newest run is now sim-v1's
    execute_all(seeded.url, plan_runs(spec, model_version="sim-v1", runs=1, seed=4242))
    after = page("compare", **link)
    assert after.selectbox(key="baseline").value == "sim-v1"
    assert after.selectbox(key="candidate").value == "sim-v2"
    assert before.header[0].value == after.header[0].value


@pytest.mark.parametrize(
    ("key", "bad", "shown"),
    [
        ("baseline", "sim-v9", None),
        ("candidate", "sim-v9", None),
        ("scenario", "nowhere", "customer-service"),
        ("paired", "sometimes", "auto"),
        ("alpha", "0.2", "0.05"),
    ],
)
def test_a_bad_compare_value_says_what_was_wrong_and_what_is_shown(
    seeded: EventStore, key: str, bad: str, shown: str | None
) -> None:
    app = page("compare", **{key: bad})
    assert not app.exception, app.exception
    used = app.selectbox(key=key).value
    assert shown is None or used == shown
    assert app.selectbox(key="baseline").value != app.selectbox(key="candidate").value
    warnings = [w.value for w in app.warning if md(repr(bad)) in w.value]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith(key if key != "paired" else "pairing")
    assert warnings[0].endswith(md(f"showing {used}."))
    assert app.query_params[key] == used  # the URL now says what is shown


def test_compare_alpha_sets_the_confidence_of_every_interval(seeded: EventStore) -> None:
    from steplog.compare import compare

    app = page("compare", baseline="sim-v1", candidate="sim-v2", alpha="0.01")
    expected = compare(
        seeded, baseline="sim-v1", candidate="sim-v2", scenario="customer-service", confidence=0.99
    )
    rows = app.dataframe[0].value
    assert "99% CI" in rows.columns
    first = rows[rows["scenario"] == "customer-service"].iloc[0]
    assert first["verdict"] == expected["decision"]["head"]
