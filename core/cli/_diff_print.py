"""`steplog diff` in text: how the two runs are related, and with --content what each
differing step said and did differently (messages, tool results, outputs) as text diffs."""

from typing import Any

from ._shared import console


def print_relation(result: dict[str, Any]) -> None:
    """One line when one run is the other's replay, fork or rerun: mode, step, version,
    outcome."""
    link = result.get("relation")
    if not link:
        return
    side = "B" if link["child"] == result["b"]["run_id"] else "A"
    step = f" at step {link['step']}" if link["step"] is not None else ""
    console.print(
        f"{side} is a {link['mode']} of {link['parent']}{step} on {link['version']}: "
        f"{link['outcome']}",
        highlight=False,
        markup=False,
    )


def _print_changes(title: str, changes: list[dict[str, Any]]) -> None:
    console.print(f"\n{title}", highlight=False, markup=False)
    for change in changes:
        console.print(f"  {change['what']}: {change['kind']}", highlight=False, markup=False)
        for line in change["diff"]:
            console.print(f"    {line}", highlight=False, markup=False, soft_wrap=True)


def print_content(result: dict[str, Any], *, limit: int | None = None) -> None:
    """The run's task and input if they differ, then per step whose content differs each
    differing item as a unified diff (A then B), then the outcome and final output if they
    differ; ``limit``: at most that many steps (the first ones)."""
    rows = [row for row in result["steps"] if row.get("content")]
    run = result.get("run") or {}
    if not rows and not run.get("input") and not run.get("output"):
        console.print("no content differences", highlight=False, markup=False)
        return
    if run.get("input"):
        _print_changes("run input", run["input"])
    for row in rows[:limit]:
        where = " / ".join(
            f"{side} #{row[f'index_{side.lower()}']} {row[f'name_{side.lower()}']}"
            for side in "AB"
            if row[f"index_{side.lower()}"] is not None
        )
        _print_changes(f"{row['mark']} {where}", row["content"])
    if limit is not None and len(rows) > limit:
        console.print(f"\n... {len(rows) - limit} more step(s)", highlight=False, markup=False)
    if run.get("output"):
        _print_changes("run outcome and final output", run["output"])
