"""A run as a span waterfall: steps, attempts, and model and tool calls on a time axis.

Pure (no Streamlit). Calls carry their latency; where they ran is taken from when they were
recorded (a call is recorded when it returns) and, when recording times coincide (a simulated
or imported run), from their order: each call starts no earlier than the previous one ended.
A step spans its calls. The failing path (the fatal step, its last attempt, its failed calls)
is ``fatal``; errors the run went on after are ``recovered``.
"""

from __future__ import annotations

from typing import Any

from steplog.ui.trajectory import Entry, Trajectory

COLOURS = {"ok": "#4c78a8", "recovered": "#f58518", "fatal": "#e45756"}
CALLS = ("model", "tool")


def _call_row(entry: Entry, start: float, end: float, state: str, depth: int) -> dict[str, Any]:
    p = entry.payload
    tokens = int(p.get("input_tokens") or 0) + int(p.get("output_tokens") or 0)
    return {
        "id": f"e{entry.event.seq}",
        "label": "  " * depth + f"{entry.title} · call {p.get('call_index')}",
        "kind": entry.kind,
        "start": start,
        "end": end,
        "ms": round((end - start) * 1000, 1),
        "tokens": tokens,
        "cost": float(p.get("cost_usd") or 0.0),
        "state": state,
        "error": entry.error or "",
    }


def spans(found: Trajectory) -> list[dict[str, Any]]:
    """The waterfall's rows in display order (seconds from the run's first event)."""
    entries = [e for s in found.steps for a in s.attempts for e in a.entries]
    if not entries:
        return []
    t0 = min(e.event.recorded_at for e in entries)
    fatal = found.fatal_step
    rows: list[dict[str, Any]] = []
    cursor = 0.0
    for step in found.steps:
        step_rows: list[dict[str, Any]] = []
        for attempt in step.attempts:
            on_path = step is fatal and attempt is step.attempts[-1]
            attempt_rows: list[dict[str, Any]] = []
            for entry in attempt.entries:
                if entry.kind not in CALLS:
                    continue
                seconds = float(entry.payload.get("latency_ms") or 0.0) / 1000
                recorded = (entry.event.recorded_at - t0).total_seconds()
                end = max(cursor + seconds, recorded)
                cursor = end
                state = "ok" if not entry.error else "fatal" if on_path else "recovered"
                attempt_rows.append(_call_row(entry, end - seconds, end, state, 2))
            if len(step.attempts) > 1:
                state = "fatal" if on_path else "recovered" if attempt.errors else "ok"
                step_rows.append(
                    _group(
                        f"s{step.index}a{attempt.number}",
                        f"  #{step.index} attempt {attempt.number}",
                        "attempt",
                        attempt_rows,
                        cursor,
                        state,
                    )
                )
            step_rows.extend(attempt_rows)
        state = "fatal" if step is fatal else "recovered" if step.errors else "ok"
        group = _group(
            f"s{step.index}", f"#{step.index} {step.name}", "step", step_rows, cursor, state
        )
        if step is fatal:
            group["error"] = "; ".join(e.error or "" for e in found.fatal_errors)
        rows.append(group)
        rows.extend(step_rows)
    for order, row in enumerate(rows):
        row["order"] = order
    return rows


def _group(
    key: str, label: str, kind: str, children: list[dict[str, Any]], at: float, state: str
) -> dict[str, Any]:
    calls = [c for c in children if c["kind"] in CALLS]
    start = min((c["start"] for c in calls), default=at)
    end = max((c["end"] for c in calls), default=at)
    return {
        "id": key,
        "label": label,
        "kind": kind,
        "start": start,
        "end": end,
        "ms": round((end - start) * 1000, 1),
        "tokens": sum(c["tokens"] for c in calls),
        "cost": sum(c["cost"] for c in calls),
        "state": state,
        "error": "",
    }


def height(rows: int) -> int:
    """The chart's height in pixels: a readable band per row, the axis and legend."""
    return 22 * rows + 90


def chart(rows: int) -> dict[str, Any]:
    """The Vega-Lite spec: one bar per row, red on the failing path, a click selects a bar."""
    return {
        "height": {"step": 22},
        "params": [{"name": "pick", "select": {"type": "point", "fields": ["id"]}}],
        "mark": {"type": "bar", "cornerRadius": 2, "cursor": "pointer"},
        "encoding": {
            "y": {
                "field": "label",
                "type": "nominal",
                "sort": {"field": "order"},
                "title": None,
                "axis": {"labelLimit": 320, "labelFontSize": 11, "labelOverlap": False},
            },
            "x": {"field": "start", "type": "quantitative", "title": "seconds from the start"},
            "x2": {"field": "end"},
            "color": {
                "field": "state",
                "type": "nominal",
                "scale": {"domain": list(COLOURS), "range": list(COLOURS.values())},
                "legend": {"orient": "top", "title": None},
            },
            "opacity": {"condition": {"param": "pick", "value": 1}, "value": 0.55},
            "tooltip": [
                {"field": "label", "title": "span"},
                {"field": "ms", "title": "ms", "format": ",.0f"},
                {"field": "tokens", "format": ","},
                {"field": "cost", "title": "cost $", "format": ".4f"},
                {"field": "error"},
            ],
        },
    }
