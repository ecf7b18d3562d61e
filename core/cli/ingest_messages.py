"""``steplog import messages`` and ``steplog import mini-swe-agent``: chat logs become runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import SteplogError
from ..ingest.sniff import MESSAGES, MINI_SWE, require_kind
from ._shared import DbOption, JsonOption
from .ingest import FileArgument, RedactOption, _finish, _store, default_redactor, import_app

ScenarioOption = Annotated[
    str | None, typer.Option("--scenario", help="Scenario of every run (default: the record's).")
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Model version of every run (default: the record's)."),
]


@import_app.command("messages")
def import_messages_cmd(
    file: FileArgument,
    scenario: ScenarioOption = None,
    model: ModelOption = None,
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import OpenAI-format chat message lists (with tool calls) as runs.

    One run per file (a JSON list of messages, or an object with `messages`) or per line (JSON
    Lines). Optional record fields: id, scenario, task_instance_id, model, seed, session_id,
    user_id, outcome (completed/failed...), error. Idempotent.
    """
    from ..ingest.messages import import_messages

    require_kind(file, MESSAGES)
    with _store(db) as store:
        report = import_messages(
            store,
            file,
            redactor=default_redactor(redact_patterns),
            scenario=scenario,
            model=model,
        )
    _finish(report, str(file), f"messages:{file}", as_json)


@import_app.command("mini-swe-agent")
def import_mini_swe_cmd(
    path: Annotated[
        Path,
        typer.Argument(exists=True, help="A mini-swe-agent trajectory (.traj.json) or a folder."),
    ],
    scenario: ScenarioOption = None,
    model: ModelOption = None,
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import mini-swe-agent trajectories: each becomes a run (exit status = outcome)."""
    from functools import partial

    from ..ingest.messages import import_messages
    from ..ingest.mini_swe import conversation_of_trajectory, instance_of, trajectory_files

    files = trajectory_files(path)
    if not files:
        raise SteplogError(f"{path} holds no *.traj.json file")
    from ..ingest.report import ImportReport

    redactor = default_redactor(redact_patterns)
    report = ImportReport()
    folder = path.is_dir()
    with _store(db) as store:
        for file in files:
            try:
                require_kind(file, MINI_SWE)
                convert = partial(conversation_of_trajectory, instance=instance_of(file))
                one = import_messages(
                    store,
                    file,
                    redactor=redactor,
                    scenario=scenario,
                    model=model,
                    convert=convert,
                    source="mini-swe-agent",
                )
            except SteplogError as exc:  # the whole file: refused, the folder's others go on
                if not folder:
                    raise
                report.refuse(str(file), str(exc))
                continue
            if folder:
                report.absorb(str(file), one)
            else:
                report = one
    _finish(report, str(path), f"mini-swe-agent:{path}", as_json)
