"""Issue 35, item 4: attribution states its assumption and checks it, and reads every fork.

The mid-chain rescue scenario: the run's model makes its one silent mistake at step 12 of 15;
the rescuer makes a systematic slip of its own at step 10 (every sample). So only forks at
steps 11 and 12 rescue: before 11 the rescuer's own slip sinks the fork, after 12 the mistake
is already made. The binary search (which assumes rescue gets harder with depth) probes
7, 3, 1, 0 and rescues nowhere: it must say so and where it looked, and the bounded check of
the unprobed steps must find step 12. Afterwards every call reads the session's forks (a
second call forks nothing), and a scan's forks are part of the verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from steplog.attribution import attribute, locate
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import ENV_SCENARIOS, get_scenario
from steplog.harness.simulated import planted_step
from steplog.store import EventStore

SCENARIO = """
name = "mid-chain"
version = "1"
description = "15 chained steps; the rescuer slips at step 10 itself"
task_type = "ledger"
demo_versions = ["sim-late", "sim-slipping"]
completion = { check = "field_accuracy", threshold = 1.0 }

[config]
max_retry_per_step = 2

[generate_instances]
count = 4
id_prefix = "chain-"
params = { entries = 15 }

[[steps]]
name = "post_{n}"
repeat = "entries"
tool = "ledger_api"
fields = ["amount", "memo"]
rule_fields = ["amount"]

[models.sim-late]
description = "one silent mistake, always at step 12"
base_error = 0.0
planted_error_window = [12, 12]

[models.sim-slipping]
description = "the rescuer: no errors but a systematic silent slip at step 10"
base_error = 0.0
planted_error_window = [10, 10]
planted_per_instance = true
"""


@pytest.fixture
def mid_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "mid-chain.toml").write_text(SCENARIO)
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    yield folder


def _failed_run(store: EventStore) -> str:
    spec = get_scenario("mid-chain")
    assert planted_step("sim-slipping", spec.model("sim-slipping"), 1, "chain-0") == 10
    [outcome] = execute_all(store.url, plan_runs(spec, model_version="sim-late", runs=1, seed=5))
    assert outcome.status == "failed"
    return outcome.run_id


def test_the_search_says_where_it_looked_and_what_it_assumed() -> None:
    def fork(step: int, sample: int) -> bool:
        return step in (11, 12)

    found = locate(fork, 14, forks=10)
    assert found.verdict == "not_rescuable" and found.probed == (7, 3, 1, 0)
    checked = locate(fork, 14, forks=10, check_unprobed=True)
    assert checked.verdict == "decisive" and checked.decisive_step == 12
    assert checked.unprobed_checked and checked.forks_spent < 15 * 10


def test_mid_chain_rescue_on_a_real_store(store: EventStore, mid_chain: Path) -> None:
    run_id = _failed_run(store)
    first = attribute(store, run_id, rescuer="sim-slipping", forks=4)
    assert first.verdict == "not_rescuable"
    assert first.summary.startswith(
        "not rescued by sim-slipping at steps [7, 3, 1, 0] (search assumes rescue gets harder "
        "with depth)"
    )
    assert "--check-unprobed" in first.summary
    assert first.as_dict()["assumption"] == "rescue gets harder with depth (binary search)"
    # a second call forks nothing: every fork is read back
    before = store.last_position()
    again = attribute(store, run_id, rescuer="sim-slipping", forks=4)
    assert store.last_position() == before
    assert again.forks_new == 0 and again.forks_reused == first.located.forks_spent
    assert again.verdict == first.verdict
    # the bounded check of the unprobed steps finds the mid-chain rescue
    checked = attribute(store, run_id, rescuer="sim-slipping", forks=4, check_unprobed=True)
    assert checked.verdict == "decisive" and checked.decisive_step == 12
    assert checked.forks_reused == first.located.forks_spent
    # and from now on the plain search reads those forks too: the verdict is every fork's
    before = store.last_position()
    after = attribute(store, run_id, rescuer="sim-slipping", forks=4)
    assert store.last_position() == before and after.forks_new == 0
    assert after.verdict == "decisive" and after.decisive_step == 12


def test_a_scan_s_forks_are_part_of_the_next_verdict(store: EventStore, mid_chain: Path) -> None:
    run_id = _failed_run(store)
    scanned = attribute(store, run_id, rescuer="sim-slipping", forks=2, scan=True)
    assert scanned.verdict == "decisive" and scanned.decisive_step == 12
    plain = attribute(store, run_id, rescuer="sim-slipping", forks=2)
    assert plain.forks_new == 0
    assert plain.verdict == "decisive" and plain.decisive_step == 12
    assert plain.located.forks_spent == 15 * 2  # every fork the session holds
