"""``steplog annotations``: add, edit, remove, list and queue, and one clear error line (exit 1,
no traceback) for each mistake. Both engines."""

from __future__ import annotations

import json

import pytest
from test_cli_library import invoke


@pytest.fixture
def seeded_url(store_url: str) -> str:
    code, _, err = invoke(
        "run", "invoice-extraction", "-m", "sim-v1", "--runs", "8", "--seed", "7",
        "--db", store_url,
    )  # fmt: skip
    assert code == 0, err
    return store_url


def _failed_run(url: str) -> str:
    code, out, err = invoke("annotations", "queue", "--db", url, "--json")
    assert code == 0, err
    return str(json.loads(out)["groups"][0]["runs"][0]["run_id"])


def test_add_edit_remove_list_and_queue(seeded_url: str) -> None:
    url = seeded_url
    code, out, _ = invoke("annotations", "queue", "--db", url, "--json")
    before = json.loads(out)["unlabelled"]
    assert before > 0
    run = _failed_run(url)
    code, out, err = invoke(
        "annotations", "add", run, "--label", "bad-parse", "--note", "v1 only", "--by", "ana",
        "--db", url, "--json",
    )  # fmt: skip
    assert code == 0, err
    added = json.loads(out)
    assert (added["kind"], added["label"], added["by"], added["target"]) == (
        "label", "bad-parse", "ana", run,
    )  # fmt: skip
    code, out, _ = invoke("annotations", "queue", "--db", url, "--json")
    assert json.loads(out)["unlabelled"] == before - 1
    code, out, err = invoke("annotations", "edit", added["id"], "--label", "parse", "--db", url)
    assert code == 0 and "edited" in out and "'parse'" in out, err
    code, out, _ = invoke("annotations", "list", run, "--db", url)
    assert added["id"] in out and "'parse'" in out and "v1 only" in out
    code, out, err = invoke("annotations", "remove", added["id"], "--db", url)
    assert code == 0 and "removed label" in out, err
    code, out, _ = invoke("annotations", "list", run, "--db", url)
    assert "no labels or notes" in out
    code, out, err = invoke("annotations", "list", run, "--history", "--db", url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"label {added['id']} (removed)"
    assert lines[1].startswith("  added by ana at ") and "label 'bad-parse'" in lines[1]
    assert lines[2].startswith("  edited by someone at ")
    assert lines[2].endswith("label 'bad-parse' -> 'parse'")
    assert lines[3].startswith("  removed by someone at ")
    code, out, _ = invoke("annotations", "list", run, "--history", "--db", url, "--json")
    (trail,) = json.loads(out)["history"]
    assert (trail["id"], trail["removed"]) == (added["id"], True)
    assert [c["action"] for c in trail["changes"]] == ["added", "edited", "removed"]
    code, out, _ = invoke("annotations", "queue", "--db", url)
    assert code == 0 and f"{before} unlabelled failures" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "ghost", "--label", "x"), "no failed run or failure signature 'ghost'"),
        (("add", "{run}", "--label", "  "), "a label must be 1 to 100 characters"),
        (("add", "{run}"), "give a label, a note or both"),
        (("edit", "nope", "--label", "x"), "no annotation 'nope'"),
        (("remove", "{removed}"), "was removed at"),
        (("add", "mode:zzzz", "--label", "x"), "no failure mode 'zzzz'"),
        (("list", "ghost"), "no failed run or failure signature 'ghost'"),
    ],
)
def test_mistakes_are_one_error_line(seeded_url: str, args: tuple[str, ...], message: str) -> None:
    run = _failed_run(seeded_url)
    code, out, _ = invoke(
        "annotations", "add", run, "--note", "to remove", "--db", seeded_url, "--json"
    )
    removed = json.loads(out)["id"]
    assert invoke("annotations", "remove", removed, "--db", seeded_url)[0] == 0
    filled = [a.format(run=run, removed=removed) for a in args]
    code, out, err = invoke("annotations", *filled, "--db", seeded_url)
    assert code == 1, out
    assert err.strip().startswith("error:") and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
