"""Declarative scenarios: steps, task instances, run limits and simulated model versions.

A scenario is a TOML file (see ``seeds/scenarios/``). It is data, never code: validation checks
are referred to by registered names, so a scenario file can be loaded from anywhere without
running anything it says. Scenarios are found in ``seeds/scenarios`` and in the folders listed
in ``STEPLOG_SCENARIOS`` (``:``-separated); that set is the registry of agents the harness can
run, resume and replay, keyed by ``(name, version)``: new runs use a scenario's newest version,
and a run replays with the version it recorded, so keep an old version's file (under any file
name) to keep its runs replayable.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import SteplogError
from ..events import RunConfig
from ..resources import seed_scenarios_dir

ENV_SCENARIOS = "STEPLOG_SCENARIOS"
GatePolicy = Literal["auto-approve", "auto-reject", "manual"]
AGENT_PREFIX = "scenario/"
MAX_REPEAT = 1000


class ScenarioError(SteplogError):
    """A scenario file is missing, unreadable or invalid."""


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelVersionSpec(_Spec):
    """A simulated model version: a named mix of realistic failure modes (rates per attempt)."""

    description: str = ""
    base_error: float = Field(default=0.0, ge=0, le=1, description="uniform per-step error")
    drift_per_step: float = Field(default=0.0, ge=0, le=1, description="error added per step")
    malformed_rate: float = Field(default=0.0, ge=0, le=1, description="fails schema checks")
    wrong_rate: float = Field(default=0.0, ge=0, le=1, description="caught by business rules")
    silent_error_rate: float = Field(default=0.0, ge=0, le=1, description="caught only at the end")
    loop_rate: float = Field(default=0.0, ge=0, le=1, description="repeats one action per step")
    tool_error_rate: float = Field(default=0.0, ge=0, le=1, description="timeouts, rate limits")
    input_tokens: int = Field(default=400, ge=0)
    context_growth_tokens: int = Field(default=120, ge=0, description="more context per step")
    output_tokens: int = Field(default=80, ge=0)
    price_per_1k_input: float = Field(default=0.0005, ge=0)
    price_per_1k_output: float = Field(default=0.0015, ge=0)
    latency_ms: float = Field(default=800.0, ge=0, description="simulated model latency")
    tool_latency_ms: float = Field(default=150.0, ge=0)
    tool_timeout_ms: float = Field(default=30_000.0, ge=0)
    wall_latency_ms: float = Field(default=0.0, ge=0, description="real sleep per call (pacing)")
    planted_error_window: tuple[int, int] | None = Field(
        default=None,
        description="[first, last] step index: each run makes one silent error at a step drawn "
        "(seeded) from this window, on every attempt -- ground truth for attribution",
    )
    planted_per_instance: bool = Field(
        default=False,
        description="draw the planted step from the task instance alone, not the run's seed: a "
        "systematic mistake every sample of this version makes (forks with other seeds too)",
    )

    @model_validator(mode="after")
    def _window_ordered(self) -> ModelVersionSpec:
        window = self.planted_error_window
        if window is not None and not 0 <= window[0] <= window[1]:
            raise ValueError(
                f"planted_error_window {list(window)} must be [first, last], 0 <= first <= last"
            )
        return self


class StepSpec(_Spec):
    """One step (or, with ``repeat``, a run of numbered steps) of a scenario's task."""

    name: str = Field(min_length=1, description="use {n} for the number when repeated")
    repeat: Annotated[int, Field(strict=True, ge=1, le=MAX_REPEAT)] | str | None = Field(
        default=None, description="how many times: a number or the name of an instance param"
    )
    tool: str | None = None
    inputs: list[str] | None = Field(
        default=None,
        description="earlier steps (or 'input', the task's) whose outputs this step reads; "
        "a trailing * matches every earlier step with that prefix; default: the previous step",
    )
    fields: list[str] = Field(default_factory=lambda: ["value"], min_length=1)
    rule_fields: list[str] | None = Field(
        default=None, description="fields a business rule verifies (default: all)"
    )
    custom_check: Literal["in_range"] | None = Field(
        default=None, description="third validation layer: every value within [min, max]"
    )
    min_value: float = 0.0
    max_value: float = 1000.0
    gate: bool = Field(default=False, description="ask for approval before this step")
    on_empty: Literal["retry", "proceed"] = Field(
        default="retry",
        description="when the tool returns no records: retry the step, or proceed without the "
        "data (the model answers ungrounded)",
    )
    role: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_-]*$",
        description="the agent of a multi-agent scenario that does this step (its model version "
        "can differ from the run's: a fork may upgrade one agent)",
    )

    @model_validator(mode="after")
    def _rule_fields_exist(self) -> StepSpec:
        unknown = set(self.rule_fields or ()) - set(self.fields)
        if unknown:
            raise ValueError(f"rule_fields {sorted(unknown)} are not among fields {self.fields}")
        if self.repeat is not None and "{n}" not in self.name:
            raise ValueError(f"repeated step {self.name!r} needs {{n}} in its name")
        return self


class InstanceSpec(_Spec):
    """One task instance: an id, a task type and parameters."""

    id: str = Field(min_length=1)
    task_type: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class GeneratedInstances(_Spec):
    """``count`` instances named ``{prefix}{i:02d}``, task types assigned round-robin."""

    count: int = Field(ge=1, le=10_000)
    id_prefix: str = Field(min_length=1)
    task_types: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)


class CompletionSpec(_Spec):
    """The run-level success criterion checked after the last step."""

    check: Literal["field_accuracy"]
    threshold: float = Field(ge=0, le=1)


class ConcreteStep(_Spec):
    """A step as executed: repeats expanded, with its 0-based index and resolved inputs."""

    index: int
    name: str
    inputs: tuple[str, ...]
    spec: StepSpec


class ScenarioSpec(_Spec):
    """A whole scenario file."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    version: str = "1"
    description: str = ""
    source: str = Field(default="", description="where the experiment comes from")
    task_type: str | None = None
    config: RunConfig = RunConfig()
    gate_policy: GatePolicy = "auto-approve"
    instances: list[InstanceSpec] = Field(default_factory=list)
    generate_instances: GeneratedInstances | None = None
    models: dict[str, ModelVersionSpec] = Field(min_length=2)
    demo_versions: list[str] = Field(default_factory=list)
    steps: list[StepSpec] = Field(min_length=1)
    completion: CompletionSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ScenarioSpec:
        if not self.instances and self.generate_instances is None:
            raise ValueError("give [[instances]] or [generate_instances]")
        unknown = set(self.demo_versions) - set(self.models)
        if unknown:
            raise ValueError(f"demo_versions {sorted(unknown)} are not in [models]")
        ids = [i.id for i in self.all_instances()]
        if len(ids) != len(set(ids)):
            raise ValueError("instance ids must be unique")
        for instance in self.all_instances():
            names = [s.name for s in self.steps_for(instance)]
            if len(names) != len(set(names)):
                raise ValueError(f"instance {instance.id!r}: step names repeat: {names}")
            for position, step in enumerate(self.steps_for(instance)):
                unknown = set(step.inputs) - {"input", *names[:position]}
                if unknown or not step.inputs:
                    wanted = step.spec.inputs
                    raise ValueError(
                        f"step {step.name!r} reads {sorted(unknown) or wanted}, which are not "
                        "earlier steps"
                    )
        return self

    @property
    def agent(self) -> str:
        """The registry name runs of this scenario record as their agent."""
        return AGENT_PREFIX + self.name

    @property
    def roles(self) -> list[str]:
        """The agents (roles) of a multi-agent scenario, in order of first appearance."""
        return list(dict.fromkeys(s.role for s in self.steps if s.role is not None))

    def check_role_versions(self, role_versions: dict[str, str]) -> None:
        """A clear error for an unknown agent or model version in a per-agent version map."""
        for role, version in role_versions.items():
            if role not in self.roles:
                known = ", ".join(self.roles) or "none: it is not a multi-agent scenario"
                raise ScenarioError(
                    f"scenario {self.name!r} has no agent {role!r}; its agents: {known}"
                )
            self.model(version)

    def versions_for_demo(self) -> list[str]:
        """The two model versions the demo seeds."""
        return self.demo_versions or list(self.models)[:2]

    def all_instances(self) -> list[InstanceSpec]:
        """Explicit instances, then generated ones."""
        return list(_derived(self, "instances", self._all_instances))

    def _all_instances(self) -> list[InstanceSpec]:
        instances = list(self.instances)
        generated = self.generate_instances
        if generated is not None:
            for i in range(1, generated.count + 1):
                types = generated.task_types
                instances.append(
                    InstanceSpec(
                        id=f"{generated.id_prefix}{i:02d}",
                        task_type=types[(i - 1) % len(types)] if types else None,
                        params=dict(generated.params),
                    )
                )
        return instances

    def instance(self, instance_id: str) -> InstanceSpec:
        """The instance with ``instance_id``."""
        by_id = _derived(self, "by_id", lambda: {i.id: i for i in reversed(self.all_instances())})
        if instance_id in by_id:
            return by_id[instance_id]  # type: ignore[no-any-return]
        raise ScenarioError(f"scenario {self.name!r} has no task instance {instance_id!r}")

    def model(self, version: str) -> ModelVersionSpec:
        """The model version named ``version``."""
        try:
            return self.models[version]
        except KeyError:
            raise ScenarioError(
                f"scenario {self.name!r} has no model version {version!r}; "
                f"it has: {', '.join(self.models)}"
            ) from None

    def steps_for(self, instance: InstanceSpec) -> list[ConcreteStep]:
        """The executed steps for ``instance``, repeats expanded."""
        # Expanded once per instance: a replay or a batch asks for the same steps many times.
        key = ("steps", instance.id, repr(sorted(instance.params.items())))
        return list(_derived(self, key, lambda: self._steps_for(instance)))

    def _steps_for(self, instance: InstanceSpec) -> list[ConcreteStep]:
        steps: list[ConcreteStep] = []
        for spec in self.steps:
            count = 1
            if isinstance(spec.repeat, int):
                count = spec.repeat
            elif isinstance(spec.repeat, str):
                value = instance.params.get(spec.repeat)
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(
                        f"step {spec.name!r} repeats {spec.repeat!r}, but instance "
                        f"{instance.id!r} has no integer param of that name"
                    )
                if not 1 <= value <= MAX_REPEAT:
                    raise ValueError(
                        f"instance {instance.id!r}: {spec.repeat} = {value} is outside "
                        f"1..{MAX_REPEAT}"
                    )
                count = value
            for n in range(1, count + 1):
                name = (
                    spec.name.replace("{n}", f"{n:02d}") if spec.repeat is not None else spec.name
                )
                earlier = [s.name for s in steps]
                inputs = (
                    _resolve_inputs(spec.inputs, earlier)
                    if spec.inputs is not None
                    else ((earlier[-1] if earlier else "input"),)
                )
                # built from validated parts: construct, do not validate the step spec again
                steps.append(
                    ConcreteStep.model_construct(
                        index=len(steps), name=name, inputs=inputs, spec=spec
                    )
                )
        return steps


_DERIVED: OrderedDict[int, tuple[ScenarioSpec, dict[Any, Any]]] = OrderedDict()
_DERIVED_SPECS = 64


def _derived(spec: ScenarioSpec, key: Any, build: Callable[[], Any]) -> Any:
    """``build()`` computed once per scenario spec object and ``key`` (specs are immutable data;
    a copy is another object, so it never sees its original's lists). The few most recent
    specs are kept."""
    entry = _DERIVED.get(id(spec))
    if entry is None or entry[0] is not spec:
        entry = _DERIVED[id(spec)] = (spec, {})
        while len(_DERIVED) > _DERIVED_SPECS:
            _DERIVED.popitem(last=False)
    values = entry[1]
    if key not in values:
        values[key] = build()
    return values[key]


def _resolve_inputs(wanted: list[str], earlier: list[str]) -> tuple[str, ...]:
    resolved: list[str] = []
    for name in wanted:
        if name.endswith("*"):
            resolved.extend(e for e in earlier if e.startswith(name[:-1]))
        else:
            resolved.append(name)
    return tuple(dict.fromkeys(resolved))


def load_scenario(path: Path) -> ScenarioSpec:
    """Parse and validate one scenario file, with errors naming the file and the field."""
    try:
        data = tomllib.loads(_bounded_toml(path))
    except FileNotFoundError:
        raise ScenarioError(f"scenario file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{path}: not valid TOML: nested too deeply") from None
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(file)'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise ScenarioError(f"{path}: {problems}") from None


def _bounded_toml(path: Path) -> str:
    """The file's text, refused before parsing when it is too big or nests too deeply."""
    from ..ingest.bounds import MAX_TOML_BYTES, MAX_TOML_DEPTH, nesting_error

    with path.open("rb") as stream:
        data = stream.read(MAX_TOML_BYTES + 1)
    if len(data) > MAX_TOML_BYTES:
        raise ScenarioError(f"{path}: larger than {MAX_TOML_BYTES:,} bytes, the limit")
    too_deep = nesting_error(data, limit=MAX_TOML_DEPTH, toml=True)
    if too_deep:
        raise ScenarioError(f"{path}: not accepted: {too_deep}")
    return data.decode("utf-8")


def scenario_dirs() -> list[Path]:
    """Where registered scenarios live: the seeds, then ``STEPLOG_SCENARIOS``."""
    extra = [Path(p) for p in os.environ.get(ENV_SCENARIOS, "").split(os.pathsep) if p]
    return [seed_scenarios_dir(), *extra]


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Orders versions naturally: ``"2" < "10"``, ``"1.2" < "1.10"``."""
    parts = re.findall(r"\d+|[^\d.\-_]+", version)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


@dataclass(frozen=True, slots=True)
class RegisteredScenario:
    """A scenario version and the file it came from."""

    spec: ScenarioSpec
    path: Path


def scenario_registry() -> dict[tuple[str, str], RegisteredScenario]:
    """Every scenario version in the registry folders, keyed by ``(name, version)``.

    Older versions kept as their own files stay registered, so runs recorded with them can be
    replayed. Two files with the same name and version are an error naming both: neither
    silently shadows the other. Files are parsed once and re-read only when they change.
    """
    found: dict[tuple[str, str], RegisteredScenario] = {}
    seen: set[Path] = set()
    for folder in scenario_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.glob("*.toml") if p.is_file()):
            resolved = path.resolve()
            if resolved in seen:  # a folder listed twice
                continue
            seen.add(resolved)
            stat = path.stat()
            spec = _load_cached(path, stat.st_mtime_ns, stat.st_size)
            key = (spec.name, spec.version)
            if key in found:
                raise ScenarioError(
                    f"scenario {spec.name!r} version {spec.version} is defined twice: in "
                    f"{found[key].path} and in {path}; rename one, or give it another version"
                )
            found[key] = RegisteredScenario(spec, path)
    return found


def scenario_versions() -> dict[str, list[RegisteredScenario]]:
    """Every registered scenario's versions by name, newest first."""
    by_name: dict[str, list[RegisteredScenario]] = {}
    for entry in scenario_registry().values():
        by_name.setdefault(entry.spec.name, []).append(entry)
    for entries in by_name.values():
        entries.sort(key=lambda e: version_key(e.spec.version), reverse=True)
    return dict(sorted(by_name.items()))


def registered_scenarios() -> dict[str, ScenarioSpec]:
    """Every registered scenario by name, at its newest version (what new runs use)."""
    return {name: entries[0].spec for name, entries in scenario_versions().items()}


@functools.lru_cache(maxsize=256)
def _load_cached(path: Path, mtime_ns: int, size: int) -> ScenarioSpec:
    return load_scenario(path)


def get_scenario(name: str, version: str | None = None) -> ScenarioSpec:
    """A registered scenario by name (or by its agent name, ``scenario/NAME``): its newest
    version, or ``version``."""
    key = name.removeprefix(AGENT_PREFIX)
    versions = scenario_versions()
    if key not in versions:
        known = ", ".join(sorted(versions)) or "none"
        raise ScenarioError(f"no registered scenario {key!r}; registered: {known}")
    if version is None:
        return versions[key][0].spec
    for entry in versions[key]:
        if entry.spec.version == version:
            return entry.spec
    have = ", ".join(e.spec.version for e in versions[key])
    raise ScenarioError(
        f"scenario {key!r} has no registered version {version!r} (registered: {have}); keep "
        f"that version's file in a scenario folder (e.g. {key}.v{version}.toml) to use it"
    )
