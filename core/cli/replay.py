"""Commands that re-run recorded runs: replay, fork, diff, regress."""

import json
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from ..errors import SteplogError
from ._diff_print import print_content, print_relation
from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    app,
    console,
    description_column,
)

# --- replay ----------------------------------------------------------------------------------


def _version_map(pairs: list[str]) -> dict[str, str]:
    """``AGENT=VERSION`` options as a map (an agent named twice: the last one)."""
    found: dict[str, str] = {}
    for pair in pairs:
        role, equals, version = pair.partition("=")
        if not equals or not role.strip() or not version.strip():
            raise SteplogError(f"--agent-version takes AGENT=VERSION, not {pair!r}")
        found[role.strip()] = version.strip()
    return found


@app.command("replay")
def replay_cmd(
    run_id: Annotated[str, typer.Argument(help="The run to replay.")],
    fork_at_step: Annotated[
        int | None, typer.Option(min=0, help="Serve the recording before step K, then go live.")
    ] = None,
    model_version: Annotated[
        str | None, typer.Option(help="With --fork-at-step: the version to continue on.")
    ] = None,
    import_module: Annotated[
        str | None,
        typer.Option(
            "--import",
            help="Module (in the current folder or installed) or .py file that registers your "
            "agent (SDK and imported runs).",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="Replay an imported (OTLP/Inspect) run against this registered agent."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="With --fork-at-step: continue on this seed (a sample index: forks with "
            "different seeds are different futures); default: the original's.",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Replay with the current code and compare with the recording in memory, "
            "writing nothing; exit 1 where behaviour changed.",
        ),
    ] = False,
    agent_version: Annotated[
        list[str] | None,
        typer.Option(
            "--agent-version",
            metavar="AGENT=VERSION",
            help="With --fork-at-step, multi-agent runs (scenario or SDK): answer this agent with "
            "another model version (repeatable); the others keep --model-version.",
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a run with its recorded responses (identical or not?), or fork it at a step."""
    from ..replay import replay

    role_versions = _version_map(agent_version) if agent_version else None
    if import_module:
        import_agent_code(import_module)

    with _opened(db) as store:
        result = replay(
            store,
            run_id,
            fork_at_step=fork_at_step,
            model_version=model_version,
            agent=agent,
            seed=seed,
            check=check,
            role_versions=role_versions,
        )
    if as_json:
        _print_json(result.as_dict())
    else:
        head = (
            f"check-only replay of {result.original} (nothing written)"
            if check
            else f"{result.mode} replay of {result.original} -> {result.run_id}"
        )
        console.print(f"{head}\n{result.summary}", highlight=False, markup=False)
        if result.first_difference and not check:
            console.print(
                f"first difference: {json.dumps(result.first_difference)}",
                highlight=False,
                markup=False,
            )
        for line in (*result.notes, *result.nondeterminism, *result.edges):
            console.print(f"warning: {line}", highlight=False, markup=False)
    if check:
        if result.behaviour_changed or result.agent_error is not None or result.identical is None:
            raise typer.Exit(1)  # never 0 without a comparison that found the replay alike
    elif result.divergence is not None or result.identical is False:
        raise typer.Exit(1)


def import_agent_code(target: str) -> None:
    """Import the module or file that registers the user's agent; one-line errors."""
    import importlib
    import importlib.util
    import os
    import sys
    from pathlib import Path

    path = Path(target)
    try:
        if target.endswith(".py") or os.sep in target or "/" in target:
            if not path.is_file():
                raise SteplogError(f"--import {target}: no such file")
            name = path.stem
            spec = importlib.util.spec_from_file_location(name, path.resolve())
            if spec is None or spec.loader is None:
                raise SteplogError(f"--import {target}: not a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.resolve().parent))
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            importlib.import_module(target)
    except SteplogError:
        raise
    except SystemExit as exc:  # a script run on import (argparse, sys.exit) must not end steplog
        raise SteplogError(
            f"--import {target}: it exited while being imported (SystemExit: {exc.code}); "
            "put its script part under if __name__ == '__main__':"
        ) from None
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise SteplogError(f"--import {target}: {type(exc).__name__}: {first}") from None


@app.command("diff")
def diff_cmd(
    run_a: Annotated[str, typer.Argument(help="First run.")],
    run_b: Annotated[str, typer.Argument(help="Second run.")],
    db: DbOption = None,
    as_json: JsonOption = False,
    content: Annotated[
        bool,
        typer.Option(
            "--content",
            help="Also show what the differing steps said and did differently: messages, "
            "tool arguments and results, outputs, as text diffs (always in --json).",
        ),
    ] = False,
) -> None:
    """Compare two runs as aligned trajectories; exit 1 when they behave differently.

    Rows: = same, ~ same status but other output/attempts/tokens/content, ! other status,
    - only in A, + only in B.
    """
    from ..replay import diff_runs, diff_verdict

    with _opened(db) as store:
        diff = diff_runs(store, run_a, run_b)
    result = diff.as_dict()  # the printers lay out the JSON document
    if as_json:
        _print_json(result)
    else:
        print_relation(result)
        _print_diff(result, diff_verdict(diff))
        if content:
            print_content(result)
    if diff.behaviour_differs:
        raise typer.Exit(1)


def _print_diff(result: dict[str, Any], verdict: str) -> None:
    from ..replay import where

    a, b = result["a"], result["b"]
    console.print(
        f"A {a['run_id']} ({a['model_version']}, {a['status']}, retries {a['retries']}, "
        f"tokens {a['tokens']:,})\nB {b['run_id']} ({b['model_version']}, {b['status']}, "
        f"retries {b['retries']}, tokens {b['tokens']:,})",
        highlight=False,
        markup=False,
    )
    console.print(verdict, highlight=False, markup=False)
    table = Table("", "#A", "step A", "A", "#B", "step B", "B", "content differs in", box=None)
    for row in result["steps"]:

        def cell(side: dict[str, Any] | None) -> str:
            return "" if side is None else f"{side['status']} x{side['attempts']}"

        def index(value: int | None) -> str:
            return "" if value is None else str(value)

        table.add_row(
            row["mark"],
            index(row["index_a"]),
            row["name_a"] or "",
            cell(row["a"]),
            index(row["index_b"]),
            row["name_b"] or "",
            cell(row["b"]),
            where(row["content"]),
        )
    console.print(table)
    counts = result["counts"]
    console.print(
        " ".join(f"{mark}{counts[mark]}" for mark in "=~!-+"), highlight=False, markup=False
    )


@app.command("regress")
def regress_cmd(
    regression_set: Annotated[str, typer.Argument(help="The regression set.")],
    model_version: Annotated[
        str | None, typer.Option(help="The candidate version to run the samples on.")
    ] = None,
    mode: Annotated[
        Literal["fork", "rerun"],
        typer.Option(
            help="fork (at the earliest step that can change each sample's outcome) or rerun "
            "(the whole task again)."
        ),
    ] = "fork",
    fork_at: Annotated[
        Literal["earliest", "decisive"],
        typer.Option(
            help="With --mode fork: earliest (the first step that can change the outcome) or "
            "decisive (each sample's decisive step from a recorded steplog attribute).",
        ),
    ] = "earliest",
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="CI gate: replay every sample exactly with the current code, writing nothing; "
            "exit 1 if any behaved differently.",
        ),
    ] = False,
    import_module: Annotated[
        str | None,
        typer.Option("--import", help="With --check: module or .py file registering your agent."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a regression set on a candidate version and, as a control, on the samples' own
    version (same fork steps, same seeds): the paired difference and the fix rate per failure.
    With --check: replay every sample exactly with the current code (a CI gate)."""
    if check:
        _regress_check(regression_set, import_module, db, as_json)
        return
    if model_version is None:
        raise SteplogError("regress needs --model-version VERSION (or --check)")
    from ..regress import regress

    with _opened(db) as store:
        result = regress(
            store,
            regression_set,
            model_version=model_version,
            mode=mode,
            fork_at=fork_at,
        )
    if as_json:
        _print_json(result)
        return
    _print_regress(result)


def _print_regress(result: dict[str, Any]) -> None:
    def outcome(arm: dict[str, Any]) -> str:
        return "pass" if arm["passed"] else arm["status"]

    table = Table("sample", "fork step", "why there", "control", "candidate", box=None)
    for r in result["results"]:
        table.add_row(
            r["original"],
            "" if r["fork_step"] is None else str(r["fork_step"]),
            r["fork_reason"],
            outcome(r["control"]),
            outcome(r["candidate"]),
        )
    console.print(table)
    by_signature = Table("failure", "samples", "fix rate (Wilson 95%)", "control passes", box=None)
    for group in result["by_signature"]:
        rate = group["fix_rate"]
        by_signature.add_row(
            group["failure"],
            str(group["samples"]),
            f"{group['fixed']}/{group['samples']} = {rate['estimate']:.0%} "
            f"[{rate['ci'][0]:.0%}, {rate['ci'][1]:.0%}]",
            f"{group['control_pass']}/{group['samples']}",
        )
    console.print(by_signature)
    fix = result["fix_rate"]
    console.print(
        f"fix rate {result['now_pass']}/{result['compared']} = {fix['estimate']:.0%} "
        f"[{fix['ci'][0]:.0%}, {fix['ci'][1]:.0%}] (Wilson)",
        highlight=False,
        markup=False,
    )
    console.print(result["verdict"], highlight=False, markup=False)


def _regress_check(set_name: str, import_module: str | None, db: str | None, as_json: bool) -> None:
    """``regress SET --check``: exit 1 listing each sample whose behaviour changed."""
    from ..replay import check_set

    if import_module:
        import_agent_code(import_module)
    with _opened(db) as store:
        if as_json or not console.is_terminal:
            result = check_set(store, set_name)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress

            columns = (description_column(), BarColumn(), MofNCompleteColumn())
            with Progress(*columns, console=console, transient=True) as bar:
                task = bar.add_task(f"checking {set_name}", total=None)

                def advance(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                result = check_set(store, set_name, progress=advance)
    if as_json:
        _print_json(result.as_dict())
    else:
        for sample in result.samples:
            if not sample.passed:
                console.print(f"{sample.run_id}: {sample.summary}", highlight=False, markup=False)
        console.print(result.verdict, highlight=False, markup=False)
    if not result.passed:
        raise typer.Exit(1)
