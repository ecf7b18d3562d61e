"""Vega-Lite specs for the Compare page, written out (what Altair would generate, without
building and validating Altair objects on every render): tooltips, a zero line, integer step
ticks, one colour per version (the same two colours on every chart)."""

from __future__ import annotations

from typing import Any

BASELINE_COLOUR = "#4c78a8"
CANDIDATE_COLOUR = "#f58518"


def field(name: str, kind: str = "quantitative", **more: Any) -> dict[str, Any]:
    """One encoding channel."""
    return {"field": name, "type": kind, **more}


def colours(baseline: str, candidate: str) -> dict[str, Any]:
    """Colour by version: baseline blue, candidate orange, on every chart."""
    return field(
        "version",
        "nominal",
        scale={"domain": [baseline, candidate], "range": [BASELINE_COLOUR, CANDIDATE_COLOUR]},
        legend={"orient": "top", "title": None},
    )


def interval_chart(
    y: str,
    *,
    x_title: str,
    percent: bool,
    colour: dict[str, Any] | None = None,
    zero: bool = False,
    domain: list[float] | None = None,
) -> dict[str, Any]:
    """An estimate with its interval per row of ``y`` (columns estimate, low, high)."""
    fmt = ".1%" if percent else ".3g"
    axis: dict[str, Any] = {"format": "%" if percent else "~g"}
    x = field("low", title=x_title, axis=axis)
    if domain is not None:
        x["scale"] = {"domain": domain}
    y_axis = field(y, "nominal", title=None, axis={"labelLimit": 220})
    tooltip = [
        field(y, "nominal"),
        field("estimate", format=fmt),
        field("low", format=fmt),
        field("high", format=fmt),
    ]
    point: dict[str, Any] = {"x": field("estimate"), "y": y_axis, "tooltip": tooltip}
    rule: dict[str, Any] = {"x": x, "x2": {"field": "high"}, "y": y_axis, "tooltip": tooltip}
    if colour is not None:
        point["color"] = colour
        rule["color"] = colour
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "rule", "strokeWidth": 3}, "encoding": rule},
        {"mark": {"type": "point", "filled": True, "size": 110}, "encoding": point},
    ]
    if zero:
        layers.insert(
            0,
            {
                "data": {"values": [{"zero": 0}]},
                "mark": {"type": "rule", "strokeDash": [4, 4], "color": "#888"},
                "encoding": {"x": field("zero")},
            },
        )
    return {"height": {"step": 34}, "layer": layers}


def survival_chart(baseline: str, candidate: str) -> dict[str, Any]:
    """Kaplan-Meier step curves with their confidence bands (columns step, survival, low,
    high, at_risk, failed, version)."""
    colour = colours(baseline, candidate)
    x = field("step", title="step", axis={"tickMinStep": 1, "format": "d"})
    y = field("survival", title="still running (survival)", scale={"domain": [0, 1]})
    tooltip = [
        field("version", "nominal"),
        field("step", format="d"),
        field("survival", format=".1%"),
        field("low", format=".1%"),
        field("high", format=".1%"),
        field("at_risk", title="at risk", format="d"),
        field("failed", format="d"),
    ]
    return {
        "height": 260,
        "layer": [
            {
                "mark": {"type": "area", "opacity": 0.18, "interpolate": "step-after"},
                "encoding": {"x": x, "y": field("low"), "y2": {"field": "high"}, "color": colour},
            },
            {
                "mark": {"type": "line", "interpolate": "step-after", "point": True},
                "encoding": {"x": x, "y": y, "color": colour, "tooltip": tooltip},
            },
        ],
    }


DECISIVE_COLOUR = "#54a24b"
FAILURE_COLOUR = "#e45756"


def _marker(step: int, label: str, colour: str, dash: bool) -> list[dict[str, Any]]:
    """A vertical rule at ``step`` with its label on top."""
    data = {"values": [{"step": step, "marker": label}]}
    x = field("step")
    rule: dict[str, Any] = {"type": "rule", "color": colour, "strokeWidth": 2}
    if dash:
        rule["strokeDash"] = [5, 4]
    tooltip = [field("marker", "nominal"), field("step", format="d")]
    return [
        {"data": data, "mark": rule, "encoding": {"x": x, "tooltip": tooltip}},
        {
            "data": data,
            "mark": {"type": "text", "color": colour, "dy": -8, "align": "left", "dx": 3},
            "encoding": {"x": x, "y": {"value": 0}, "text": field("marker", "nominal")},
        },
    ]


def rescue_curve_chart(decisive: int | None, failure: int) -> dict[str, Any]:
    """The rescue rate per step with its Wilson interval (columns step, rate, low, high,
    rescued, forks); the decisive step and the recorded failure step marked."""
    x = field("step", title="fork step", axis={"tickMinStep": 1, "format": "d"})
    tooltip = [
        field("step", format="d"),
        field("rescued", format="d"),
        field("forks", format="d"),
        field("rate", title="rescue rate", format=".0%"),
        field("low", title="Wilson low", format=".0%"),
        field("high", title="Wilson high", format=".0%"),
    ]
    y = field("rate", title="rescue rate", scale={"domain": [0, 1]}, axis={"format": "%"})
    layers: list[dict[str, Any]] = [
        {
            "mark": {"type": "rule", "strokeWidth": 3, "color": BASELINE_COLOUR},
            "encoding": {"x": x, "y": field("low"), "y2": {"field": "high"}, "tooltip": tooltip},
        },
        {
            "mark": {"type": "point", "filled": True, "size": 80, "color": BASELINE_COLOUR},
            "encoding": {"x": x, "y": y, "tooltip": tooltip},
        },
    ]
    layers += _marker(failure, "failure recorded", FAILURE_COLOUR, dash=True)
    if decisive is not None:
        layers += _marker(decisive, "decisive", DECISIVE_COLOUR, dash=False)
    return {"height": 260, "layer": layers}


def decisive_histogram_chart() -> dict[str, Any]:
    """Runs per step, decisive steps next to recorded failure steps (columns step, kind, runs)."""
    kinds = ["decisive", "failure"]
    return {
        "height": 220,
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {
            "x": field("step", "ordinal", title="step", axis={"labelAngle": 0}),
            "xOffset": field("kind", "nominal", sort=kinds),
            "y": field("runs", title="runs", axis={"tickMinStep": 1, "format": "d"}),
            "color": field(
                "kind",
                "nominal",
                scale={"domain": kinds, "range": [DECISIVE_COLOUR, FAILURE_COLOUR]},
                legend={"orient": "top", "title": None},
            ),
            "tooltip": [
                field("kind", "nominal"),
                field("step", "ordinal"),
                field("runs", format="d"),
            ],
        },
    }
