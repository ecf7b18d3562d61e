"""Many runs at once: planning run ids and seeds, executing them in worker processes."""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from typing import Any

from uuid6 import uuid7

from ..store import EventStore
from .runner import continue_run, fold_run, launch
from .scenario import GatePolicy, ScenarioSpec, get_scenario


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """One run to execute: everything that determines it."""

    scenario: str
    instance_id: str
    model_version: str
    seed: int
    run_id: str
    gate_policy: GatePolicy | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended (or that it was already there)."""

    run_id: str
    status: str
    failure_type: str | None
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


def plan_runs(
    scenario: ScenarioSpec,
    *,
    model_version: str,
    runs: int,
    seed: int | None = None,
    instance_id: str | None = None,
    gate_policy: GatePolicy | None = None,
    run_id_prefix: str | None = None,
    run_id: str | None = None,
) -> list[PlannedRun]:
    """``runs`` runs over the scenario's instances (round-robin), seeds ``seed + i``.

    Without ``seed`` each run gets a fresh random seed (recorded, so it can still be replayed).
    With ``run_id_prefix`` run ids are ``{prefix}{i:04d}``, which makes a batch idempotent.
    """
    scenario.model(model_version)
    instances = [scenario.instance(instance_id)] if instance_id else scenario.all_instances()
    draw = random.SystemRandom()
    plans = []
    for i in range(runs):
        plans.append(
            PlannedRun(
                scenario=scenario.name,
                instance_id=instances[i % len(instances)].id,
                model_version=model_version,
                seed=seed + i if seed is not None else draw.randrange(2**31),
                run_id=run_id or (f"{run_id_prefix}{i:04d}" if run_id_prefix else str(uuid7())),
                gate_policy=gate_policy,
            )
        )
    return plans


_stores: dict[str, EventStore] = {}


def _store(db: str) -> EventStore:
    if db not in _stores:
        _stores[db] = EventStore.open(db)
    return _stores[db]


def execute(db: str, plan: PlannedRun) -> RunOutcome:
    """Run one planned run, or finish it if a previous attempt left it unfinished."""
    store = _store(db)
    if store.version(plan.run_id):
        state = fold_run(store, plan.run_id)
        if state.is_terminal or state.status == "awaiting_approval":
            return RunOutcome(plan.run_id, state.status, state.failure_type, skipped=True)
        ending = continue_run(store, plan.run_id)
    else:
        ending = launch(
            store,
            get_scenario(plan.scenario),
            instance_id=plan.instance_id,
            model_version=plan.model_version,
            seed=plan.seed,
            run_id=plan.run_id,
            gate_policy=plan.gate_policy,
        )
    return RunOutcome(plan.run_id, ending.status, ending.failure_type)


def execute_all(
    db: str,
    plans: Iterable[PlannedRun],
    *,
    workers: int = 1,
    on_done: Callable[[RunOutcome], None] | None = None,
) -> list[RunOutcome]:
    """Execute ``plans`` in this process (``workers=1``) or in worker processes."""
    outcomes: list[RunOutcome] = []

    def done(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)

    if workers <= 1:
        with _ctrl_c_between_runs() as stop:
            for plan in plans:
                stop()
                done(execute(db, plan))
        return outcomes
    plans = list(plans)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))
    try:
        # Ctrl-C is caught from before the first submission: a KeyboardInterrupt raised inside
        # the pool's own code (while submitting a long batch) could leave its lock held, and the
        # shutdown below would wait on it for ever
        with _ctrl_c_between_runs() as stop:
            with _workers_ignore_ctrl_c():  # the first submissions start the worker processes
                futures = [pool.submit(execute, db, plan) for plan in plans[:workers]]
            for plan in plans[workers:]:
                stop()
                futures.append(pool.submit(execute, db, plan))
            for future in as_completed(futures):
                done(future.result())
                stop()
    except BaseException:  # Ctrl-C, or a failed run: drop the runs not started, finish the rest
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return outcomes


@contextmanager
def _ctrl_c_between_runs() -> Iterator[Callable[[], None]]:
    """Ctrl-C stops the batch between runs: it yields a check that raises KeyboardInterrupt once
    Ctrl-C was pressed. A KeyboardInterrupt raised at a random point could land where a library
    swallows it (SQLAlchemy's pool logs and drops one raised while it resets a connection), and
    the batch would go on. A second Ctrl-C interrupts at once."""
    pressed = threading.Event()

    def check() -> None:
        if pressed.is_set():
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield check
        return

    def on_ctrl_c(signum: int, frame: object) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Spawn workers with Ctrl-C ignored (an ignored signal survives exec, and Python keeps it so).

    Ctrl-C goes to the whole process group; only the parent handles it, cancelling the runs not
    yet started while the ones in flight finish, so no worker prints a traceback mid-import.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
