"""``steplog ui`` and ``steplog demo``: the Streamlit app on a store, and the seeded demo."""

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Annotated

import typer

from ..errors import SteplogError
from ._shared import DbOption, app, console, err_console, styled
from .runs import _execute_with_progress, info

LOOPBACK = ("127.0.0.1", "localhost", "::1")
PortOption = Annotated[
    int, typer.Option(min=1, max=65535, metavar="PORT", help="Port to serve the UI on.")
]
HostOption = Annotated[
    str, typer.Option(metavar="ADDRESS", help="Address to bind; loopback by default.")
]
ALLOW_REPLAYS_ENV = "STEPLOG_UI_ALLOW_REPLAYS"
"""Set to ``1`` for the Streamlit app when replays and forks may be started from it."""
AllowReplaysOption = Annotated[
    bool,
    typer.Option(
        "--allow-replays",
        help="Let the UI start replays and forks (they run agent code and write runs); "
        "without it the UI is read-only.",
    ),
]


def ensure_port_free(host: str, port: int) -> None:
    """Fail with a clear message when ``host:port`` cannot be bound (taken, or no such address).

    Streamlit would only print a warning and exit; checking first lets steplog say which port
    and how to pick another, and exit 1.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SteplogError(
                    f"port {port} on {host} is already in use (another steplog ui or Streamlit?);"
                    f" pick another with --port, e.g. --port {port + 1 if port < 65535 else 8502}"
                ) from None
            raise SteplogError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _streamlit_app() -> Path:
    from importlib.util import find_spec

    ui_spec = find_spec("steplog.ui")
    app_file = Path(ui_spec.origin or "").parent / "app.py" if ui_spec else Path("ui/app.py")
    if not app_file.exists():
        raise SteplogError(f"the UI is not installed next to steplog ({app_file} is missing)")
    return app_file


def serve_ui(url: str, host: str, port: int, *, allow_replays: bool = False) -> None:
    """Run Streamlit on ``url`` until Ctrl-C or SIGTERM; a Streamlit failure exits 1. Replays
    and forks can be started from it only with ``allow_replays``."""
    from ..store import redact

    if host not in LOOPBACK:
        err_console.print(
            styled(
                ("warning:", "bold yellow"),
                f" serving on {host}: the UI has no authentication; anyone "
                "who can reach this address can read every run"
                + (" and start replays" if allow_replays else ""),
            ),
            highlight=False,
        )
    ensure_port_free(host, port)
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(_streamlit_app()),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]
    shown = f"[{host}]" if ":" in host else host
    console.print(
        f"steplog UI on http://{shown}:{port} (store {redact(url)}); press Ctrl-C to stop",
        highlight=False,
    )
    console.print(
        "replays: allowed (--allow-replays): the UI can start replays and forks"
        if allow_replays
        else "replays: off, the UI is read-only (start it with --allow-replays to replay)",
        highlight=False,
    )
    # a service manager's SIGTERM becomes Ctrl-C: the child is then stopped as well
    signal.signal(signal.SIGTERM, _interrupt)
    env = {
        **os.environ,
        "STEPLOG_DATABASE_URL": url,
        ALLOW_REPLAYS_ENV: "1" if allow_replays else "",
    }
    child = subprocess.Popen(command, env=env)
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)  # Streamlit stops cleanly on SIGINT
        with suppress(KeyboardInterrupt):
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        console.print("steplog UI stopped", highlight=False)
        return
    if code != 0:
        raise SteplogError(f"the UI (Streamlit) exited with code {code}; see its output above")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@app.command("ui", rich_help_panel="Inspect")
def ui_cmd(
    db: DbOption = None,
    port: PortOption = 8501,
    host: HostOption = "127.0.0.1",
    allow_replays: AllowReplaysOption = False,
) -> None:
    """Start the Streamlit app on this store (Ctrl-C stops it); read-only unless
    --allow-replays."""
    from ..store import EventStore, resolve_url

    url = resolve_url(db)
    # fail fast, with a clear message; a --db given is opened as it is (never created or
    # migrated: a typo must not leave an empty database behind), the default store is made
    (EventStore.open_existing(url) if db is not None else EventStore.open(url)).close()
    serve_ui(url, host, port, allow_replays=allow_replays)


@app.command("demo", rich_help_panel="Record")
def demo(
    db: DbOption = None,
    runs: Annotated[
        int, typer.Option(min=1, max=100_000, metavar="N", help="Runs per scenario and version.")
    ] = 100,
    workers: Annotated[int, typer.Option(min=1, max=64, metavar="N", help="Worker processes.")] = 1,
    no_ui: Annotated[bool, typer.Option("--no-ui", help="Seed only; do not start the UI.")] = (
        False
    ),
    port: PortOption = 8501,
    host: HostOption = "127.0.0.1",
    allow_replays: AllowReplaysOption = False,
) -> None:
    """Seed every scenario under its two demo model versions (idempotent), then show them."""
    from ..harness.batch import plan_runs
    from ..harness.scenario import registered_scenarios
    from ..store import EventStore, resolve_url

    url = resolve_url(db)
    if not no_ui:
        ensure_port_free(host, port)  # before minutes of seeding, not after
    EventStore.open(url).close()
    plans = [
        plan
        for spec in registered_scenarios().values()
        for version in spec.versions_for_demo()
        for plan in plan_runs(
            spec,
            model_version=version,
            runs=runs,
            seed=0,
            run_id_prefix=f"demo-{spec.name}-{version}-",
        )
    ]
    started = time.perf_counter()
    outcomes = _execute_with_progress(url, plans, workers, "seeding the demo", False)
    added = [o for o in outcomes if not o.skipped]
    console.print(
        f"demo: {len(added)} new run(s), {len(outcomes) - len(added)} already there "
        f"({time.perf_counter() - started:.1f} s)",
        highlight=False,
    )
    info(db=url, as_json=False)
    if not no_ui:
        serve_ui(url, host, port, allow_replays=allow_replays)
