"""``steplog annotations``: labels and notes on failures (add, edit, remove, list) and the queue
of failed runs no one has labelled yet."""

from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from ._shared import DbOption, JsonOption, _opened, _print_json, _typer, app, console

if TYPE_CHECKING:
    from ..annotations import Annotation, ModeLookup
    from ..store import EventStore

annotations_app = _typer(
    "Labels and notes on failed runs, signatures and failure modes: add, edit, remove, list, "
    "and the queue of failures not labelled yet."
)
app.add_typer(annotations_app, name="annotations")

TargetArgument = Annotated[
    str,
    typer.Argument(help="A failed run id, a signature (or signature:<id>) or mode:<id>."),
]
IdArgument = Annotated[str, typer.Argument(help="The annotation's id (see `list`).")]
ByOption = Annotated[str | None, typer.Option("--by", help="Who (recorded with the change).")]


def _mode_lookup(store: "EventStore", target: str) -> "ModeLookup | None":
    """For a ``mode:`` target, what turns a mode id or prefix into the mode's id."""
    if not target.strip().startswith("mode:"):
        return None
    from ..modes import modes_of

    modes = modes_of(store)

    def lookup(prefix: str) -> str | None:
        found = modes.mode(prefix)
        return None if found is None else found.id

    return lookup


def _line(item: "Annotation") -> str:
    text = f"label {item.label!r}" if item.kind == "label" else "note"
    if item.note:
        text += f": {item.note}"
    who = f" by {item.by}" if item.by else ""
    edited = f" (edited {item.edited_at:%Y-%m-%d %H:%M})" if item.edited_at else ""
    return f"{item.id}  {item.at:%Y-%m-%d %H:%M}{who}  {text}{edited}"


@annotations_app.command("add")
def add_cmd(
    target: TargetArgument,
    label: Annotated[str | None, typer.Option(help="A label; 'fixed' marks it fixed.")] = None,
    note: Annotated[str | None, typer.Option(help="Free text (with a label, or alone).")] = None,
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a label, a note, or a label with a note."""
    from ..annotations import annotate

    with _opened(db) as store:
        added = annotate(
            store, target, label=label, note=note, by=by, mode_of=_mode_lookup(store, target)
        )
    if as_json:
        _print_json(added.as_dict())
        return
    console.print(f"added {added.kind} {added.id} on {added.stream}", highlight=False)


@annotations_app.command("edit")
def edit_cmd(
    annotation_id: IdArgument,
    label: Annotated[str | None, typer.Option(help="The new label.")] = None,
    note: Annotated[
        str | None, typer.Option(help="The new note ('' clears a label's note).")
    ] = None,
    by: ByOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change a label or a note (the old text stays in the log)."""
    from ..annotations import edit

    with _opened(db) as store:
        changed = edit(store, annotation_id, label=label, note=note, by=by)
    if as_json:
        _print_json(changed.as_dict())
        return
    console.print(f"edited {_line(changed)}", highlight=False, markup=False)


@annotations_app.command("remove")
def remove_cmd(
    annotation_id: IdArgument, by: ByOption = None, db: DbOption = None, as_json: JsonOption = False
) -> None:
    """Withdraw a label or a note (the log keeps that it was there)."""
    from ..annotations import remove

    with _opened(db) as store:
        gone = remove(store, annotation_id, by=by)
    if as_json:
        _print_json({**gone.as_dict(), "removed": True})
        return
    console.print(f"removed {gone.kind} {gone.id} from {gone.stream}", highlight=False)


HistoryOption = Annotated[
    bool,
    typer.Option(
        "--history", help="Every label and note ever on it, removed ones too, with each change."
    ),
]


@annotations_app.command("list")
def list_cmd(
    target: TargetArgument,
    history: HistoryOption = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The labels and notes on a failed run, a signature or a mode, as they read now (with
    --history: who added, edited and removed each one, and when)."""
    from ..annotations import annotations_of, history_of, resolve

    with _opened(db) as store:
        where = resolve(store, target, mode_of=_mode_lookup(store, target))
        found = annotations_of(store, where.stream)
        trails = history_of(store, where.stream) if history else []
    if as_json:
        shown = [a.as_dict() for a in found]
        body = {"target": where.id, "kind": where.kind, "annotations": shown}
        if history:
            body["history"] = [
                {"id": t.id, "kind": t.kind, "removed": t.removed,
                 "changes": [c.as_dict() for c in t.changes]}
                for t in trails
            ]  # fmt: skip
        _print_json(body)
        return
    if history:
        if not trails:
            console.print(f"no labels or notes ever on {where.stream}", highlight=False)
        for trail in trails:
            gone = " (removed)" if trail.removed else ""
            console.print(f"{trail.kind} {trail.id}{gone}", highlight=False, markup=False)
            for change in trail.changes:
                console.print(f"  {change.sentence}", highlight=False, markup=False)
        return
    if not found:
        console.print(f"no labels or notes on {where.stream}", highlight=False)
    for item in found:
        console.print(_line(item), highlight=False, markup=False)


@annotations_app.command("queue")
def queue_cmd(
    by: Annotated[
        Literal["signature", "mode"], typer.Option("--by", help="Group by signature or mode.")
    ] = "signature",
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Show N groups.")] = 10,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Failed runs no one has labelled, largest group first, each group oldest first."""
    from ..annotations import unlabelled

    with _opened(db) as store:
        assignment = None
        if by == "mode":
            from ..modes import modes_of

            assignment = modes_of(store).assignment
        groups = unlabelled(store, by=by, modes=assignment)
    waiting = sum(len(g.items) for g in groups)
    if as_json:
        shown = [g.as_dict() for g in groups[:limit]]
        _print_json({"by": by, "unlabelled": waiting, "groups": shown})
        return
    if not groups:
        console.print("queue empty: every failure is labelled", highlight=False)
        return
    table = Table(title=f"{waiting} unlabelled failures in {len(groups)} {by}s")
    for column in (by, "unlabelled", "oldest", "next run", "failed step"):
        table.add_column(column)
    for group in groups[:limit]:
        first = group.items[0]
        table.add_row(
            group.key[:12],
            str(len(group.items)),
            f"{group.oldest:%Y-%m-%d %H:%M}",
            first.run_id,
            first.failed_step or "",
        )
    console.print(table)
