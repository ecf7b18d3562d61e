"""Harness runs with one known injected failure cause per model version (modes ground truth)."""

from __future__ import annotations

from steplog.harness.runner import launch
from steplog.harness.scenario import ModelVersionSpec, get_scenario
from steplog.store import EventStore

CAUSES: dict[str, dict[str, float]] = {
    "uniform": {"base_error": 0.6},
    "drift": {"drift_per_step": 0.05},
    "malformed": {"malformed_rate": 0.6},
    "plausible-wrong": {"wrong_rate": 0.6},
    "silent": {"silent_error_rate": 0.5},
    "loop": {"loop_rate": 0.25},
    "transient": {"tool_error_rate": 0.75},
}
"""The seven injected failure modes of the simulated models, each alone in a model version."""
SCENARIOS = ("invoice-extraction", "customer-service", "data-migration")
SILENT_ONLY_IN = "invoice-extraction"
"""Silent errors surface only at a completion criterion, which only this scenario declares."""


def seed_causes(store: EventStore, runs_per_cause: int = 12, seed: int = 100) -> dict[str, str]:
    """Run every cause in every seeded scenario; the injected cause of each run, by run id."""
    truth: dict[str, str] = {}
    for name in SCENARIOS:
        base = get_scenario(name)
        models = {f"cause-{c}": ModelVersionSpec(**rates) for c, rates in CAUSES.items()}
        scenario = base.model_copy(update={"models": {**base.models, **models}})
        instances = [i.id for i in scenario.all_instances()]
        for cause in CAUSES:
            if cause == "silent" and name != SILENT_ONLY_IN:
                continue
            for k in range(runs_per_cause):
                run_id = f"{name}-{cause}-{k}"
                launch(
                    store,
                    scenario,
                    instance_id=instances[k % len(instances)],
                    model_version=f"cause-{cause}",
                    seed=seed + k,
                    run_id=run_id,
                )
                truth[run_id] = cause
    return truth
