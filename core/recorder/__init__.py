"""Recording runs: the buffered writer, and the SDK users' own agents call.

Events of a step are buffered in memory and committed together, durably, when the step ends (or
fails), so a model call never waits on the database and a crash loses at most the step in
flight. The SDK (``record_run``, ``step``, ``model_call``, ``tool_call``, ``rng``, ``now``)
keeps the current run and step in context variables, so instrumented functions record when
called inside a run and simply run outside one::

    from .. import record_run, step, model_call, tool_call, rng, now

    @model_call("my-model-v2")
    def ask(prompt: str) -> dict: ...

    with record_run("support-bot", model_version="my-model-v2", seed=7, db="runs.db"):
        with step("classify") as s:
            s.output = ask("Which queue does this ticket belong to?")
"""

from .calls import model_call, tool_call
from .context import (
    RecordedRun,
    RecordedStep,
    current_run,
    now,
    rng,
    step,
)
from .playback import Playback
from .record import record_run
from .registry import register_agent, registered_agent, registered_agents
from .rehydrate import register_error
from .writer import RecordedRandom, RunRecorder, step_seed

__all__ = [
    "Playback",
    "RecordedRandom",
    "RecordedRun",
    "RecordedStep",
    "RunRecorder",
    "current_run",
    "model_call",
    "now",
    "record_run",
    "register_agent",
    "register_error",
    "registered_agent",
    "registered_agents",
    "rng",
    "step",
    "step_seed",
    "tool_call",
]
