"""Plant known bugs in a copy of the tree and check the tests catch every one (issue 20).

Not part of the default suite (it runs the relevant tests twice per mutant: about 10 minutes for
the 12 mutants on two busy cores):

    .venv/bin/python tests/mutation/run_mutants.py            # every mutant
    .venv/bin/python tests/mutation/run_mutants.py uuid-mask  # some, by name
    .venv/bin/python tests/mutation/run_mutants.py --list

For each mutant the tree (tracked and untracked, not ignored files) is copied to a temporary
folder, one exact snippet is replaced there, and the mutant's tests run against the copy (a
``steplog`` package of the copy comes first on PYTHONPATH, for subprocesses too). A mutant is
*caught* when at least one of its tests fails. The unmutated copy runs the same tests first and
must pass. A snippet that is no longer in the code is reported as stale (update the list).
Exit status 0 only when every mutant was caught.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"": "core", "ui": "ui", "migrations": "alembic", "seeds": "seeds"}
"""The distribution's package-dir mapping: steplog = core, steplog.ui = ui, ..."""


@dataclass(frozen=True)
class Mutant:
    name: str
    why: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "confidence-ignored",
        "Wilson always at 95% whatever --confidence says",
        "core/stats/proportions.py",
        "proportion_ci(confidence_level=confidence, method=scipy_method)",
        "proportion_ci(confidence_level=0.95, method=scipy_method)",
        ("tests/test_mutants_caught.py::test_compare_cli_uses_the_confidence_it_is_given",),
    ),
    Mutant(
        "compare-cli-drops-confidence",
        "`steplog compare` does not pass --confidence on",
        "core/cli/compare.py",
        "            confidence=confidence,\n            ci_method=",
        "            ci_method=",
        ("tests/test_mutants_caught.py::test_compare_cli_uses_the_confidence_it_is_given",),
    ),
    Mutant(
        "harness-fewer-calls",
        "a harness replay that makes fewer calls than recorded is not a divergence",
        "core/harness/runner.py",
        "    if leftover is not None:  # the code made fewer calls than were recorded",
        "    if False:  # the code made fewer calls than were recorded",
        (
            "tests/test_mutants_caught.py::test_harness_replay_that_makes_fewer_calls_records_replay_"
            "diverged",
        ),
    ),
    Mutant(
        "sdk-fewer-calls",
        "an SDK replay never checks for recorded calls left over at the end of the run",
        "core/recorder/context.py",
        "            playback.run_ended()",
        "            pass",
        (
            "tests/test_mutants_caught.py::test_sdk_replay_that_skips_a_whole_step_or_a_run_level_"
            "call_records_replay_diverged",
        ),
    ),
    Mutant(
        "no-replay-diverged",
        "a divergence stops the harness replay but records no ReplayDiverged",
        "core/harness/runner.py",
        "    recorder.record(ReplayDiverged(**divergence.as_dict()))\n"
        "    recorder.record(RunAborted(",
        "    recorder.record(RunAborted(",
        ("tests/test_replay.py::test_changed_agent_code_diverges_at_the_right_step",),
    ),
    Mutant(
        "uuid-mask",
        "UUIDs are not masked in failure signatures",
        "core/projections/signature.py",
        '    masked = _UUID.sub("<id>", masked)\n',
        "",
        (
            "tests/test_mutants_caught.py::test_a_uuid_is_masked_as_one_id",
            "tests/test_mutants_caught.py::test_failures_differing_only_by_uuid_share_a_signature",
        ),
    ),
    Mutant(
        "otlp-swallow",
        "a storage error while staging spans is swallowed: the receiver answers 200, stores 0",
        "core/ingest/otlp/pipeline.py",
        "            conflicts = with_retries(self.store.engine, lambda: self._stage(rows))\n",
        "            try:\n"
        "                conflicts = with_retries(self.store.engine, lambda: self._stage(rows))\n"
        "            except Exception:\n"
        "                return received\n",
        (
            "tests/test_mutants_caught.py::test_sqlite_write_lock_held_elsewhere_is_503_never_200",
            "tests/test_mutants_caught.py::test_postgres_table_lock_held_elsewhere_is_503_never_200",
        ),
    ),
    Mutant(
        "wilson-off-by-one",
        "the Wilson interval is computed for n + 1 trials",
        "core/stats/proportions.py",
        "ci = binomtest(x, n).proportion_ci(",
        "ci = binomtest(x, n + 1).proportion_ci(",
        ("tests/test_stats.py::test_single_proportion_intervals_newcombe_1998a",),
    ),
    Mutant(
        "no-expected-version",
        "append ignores the caller's expected version (a silent overwrite race)",
        "core/store.py",
        "if expected_version is not None and expected_version != current:",
        "if False:",
        ("tests/test_store_contract.py",),
    ),
    Mutant(
        "jeffreys-prior",
        "Jeffreys with a uniform prior (Beta(x + 1, n - x + 1)) instead of Beta(1/2, 1/2)",
        "core/stats/proportions.py",
        "float(beta.ppf(alpha / 2, x + 0.5, n - x + 0.5))",
        "float(beta.ppf(alpha / 2, x + 1, n - x + 1))",
        (
            "tests/test_published_examples.py::test_jeffreys_limits_leave_alpha_over_two_in_each_tail",
        ),
    ),
    Mutant(
        "km-linear-limits",
        "Kaplan-Meier limits on the linear scale instead of log-log",
        "core/stats/survival.py",
        'confidence_interval(confidence_level=confidence, method="log-log")',
        'confidence_interval(confidence_level=confidence, method="linear")',
        (
            "tests/test_published_examples.py::test_kaplan_meier_limits_are_the_log_log_greenwood_"
            "limits",
        ),
    ),
    Mutant(
        "boschloo-one-sided",
        "Boschloo's test one-sided instead of two-sided",
        "core/stats/proportions.py",
        'boschloo_exact([[x1, x2], [n1 - x1, n2 - x2]], alternative="two-sided")',
        'boschloo_exact([[x1, x2], [n1 - x1, n2 - x2]], alternative="greater")',
        (
            "tests/test_published_examples.py::test_boschloo_matches_an_enumeration_of_its_definition",
        ),
    ),
    Mutant(
        "staging-drops-a-mixed-resend",
        "PostgreSQL: a request whose COPY meets a span staged already stages nothing of it",
        "core/ingest/otlp/pipeline.py",
        "                pass  # a span staged already (an exporter's retry): insert the others "
        "below",
        "                return {}",
        (
            "tests/test_harden_receiver.py::test_a_resend_mixed_with_new_spans_stages_the_new_ones"
            "[postgresql]",
        ),
    ),
    Mutant(
        "queue-scans",
        "the staging tables' reads and claims left to the planner (scans of the whole backlog)",
        "core/database.py",
        '        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")',
        "        pass",
        ("tests/test_ingest_plans.py",),
    ),
    Mutant(
        "page-judges-a-cut-trace",
        "a ready look-up whose page ends inside a trace judges that trace on part of its spans",
        "core/ingest/otlp/ready.py",
        "                        del traces[last]  # the next look-up starts with it",
        "                        pass",
        (
            "tests/test_ingest_assemblers.py::test_a_page_that_ends_inside_a_trace_looks_at_that_"
            "trace_again[sqlite-root-first]",
        ),
    ),
)


def _files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in listed.decode().split("\0") if name]


def copy_tree(target: Path) -> Path:
    """The working tree copied to ``target/tree`` and a ``steplog`` package over it in
    ``target/shim`` (returned: put it first on PYTHONPATH)."""
    tree = target / "tree"
    for name in _files():
        source = ROOT / name
        if not source.is_file():
            continue  # deleted but still listed
        destination = tree / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    package = target / "shim" / "steplog"
    package.mkdir(parents=True)
    for entry in (tree / "core").iterdir():
        (package / entry.name).symlink_to(entry)
    for sub, folder in PACKAGES.items():
        if sub:
            (package / sub).symlink_to(tree / folder)
    return target / "shim"


def _env(shim: Path, tree: Path) -> dict[str, str]:
    path = os.pathsep.join([str(shim), str(tree / "tests")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def _check_shim(shim: Path, tree: Path) -> None:
    found = subprocess.run(
        [sys.executable, "-c", "import steplog, steplog.ui; print(steplog.__file__)"],
        env=_env(shim, tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not found.startswith(str(shim)):
        raise SystemExit(f"the copy's steplog is not the one imported ({found}): cannot mutate")


def _pytest(shim: Path, tree: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tree,
        env=_env(shim, tree),
        capture_output=True,
        text=True,
    )


def run(mutant: Mutant) -> str:
    """'caught', 'SURVIVED', 'stale' or 'broken baseline'."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as folder:
        shim = copy_tree(Path(folder))
        tree = Path(folder) / "tree"
        _check_shim(shim, tree)
        target = tree / mutant.path
        source = target.read_text()
        if source.count(mutant.old) != 1:
            return "stale"
        baseline = _pytest(shim, tree, mutant.tests)
        if baseline.returncode != 0:
            print(baseline.stdout[-3000:], baseline.stderr[-2000:])
            return "broken baseline"
        target.write_text(source.replace(mutant.old, mutant.new))
        mutated = _pytest(shim, tree, mutant.tests)
        if mutated.returncode == 1:  # tests ran and at least one failed
            return "caught"
        if mutated.returncode != 0:
            print(mutated.stdout[-3000:], mutated.stderr[-2000:])
            return f"error (pytest exit {mutated.returncode})"
        return "SURVIVED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:30} {mutant.why}")
        return 0
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutants {unknown}; known: {', '.join(known)}")
    chosen = [known[n] for n in args.names] if args.names else list(MUTANTS)
    results = {}
    for mutant in chosen:
        started = time.monotonic()
        results[mutant.name] = run(mutant)
        print(f"{mutant.name:30} {results[mutant.name]:16} {time.monotonic() - started:6.1f} s")
    missed = [name for name, outcome in results.items() if outcome != "caught"]
    print(f"{len(results) - len(missed)}/{len(results)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
