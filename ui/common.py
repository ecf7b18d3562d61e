"""What every page shares: the store (one per process), cached queries, and messages.

Pages read widgets, call ``steplog`` (core), and render; nothing here touches SQL. Query
results are cached per store position (``st.cache_data`` keyed by ``last_position``), so new
events show up on the next rerun without a restart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import streamlit as st
from streamlit.errors import StreamlitAPIException

from steplog.errors import SteplogError
from steplog.projections.queries import refresh
from steplog.store import EventStore, ensure_schema, redact, resolve_url, sqlite_path

T = TypeVar("T")


@st.cache_resource(show_spinner=False)
def _store(url: str) -> tuple[EventStore, tuple[int, int] | None]:
    """The store, opened as it is (never created or migrated), and which file it opened."""
    opened = EventStore.open_existing(url)  # refuses a missing file before the stat
    return opened, _identity(sqlite_path(url))


def _identity(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    found = path.stat()
    return found.st_dev, found.st_ino


def store() -> EventStore:
    """The process's store (the engine is cached; the URL comes from ``steplog ui --db``)."""
    return _store(resolve_url())[0]


def store_url() -> str:
    """The store's URL as the user gave it, password hidden."""
    return redact(resolve_url())


def store_problem(again: bool = True) -> str | None:
    """Why no page can show the store, in one line (``None`` when it is fine): the database
    is missing, not migrated, not steplog's, or its file was removed or replaced meanwhile."""
    url = resolve_url()
    try:
        opened, identity = _store(url)
    except SteplogError as exc:  # not cached: the next page run looks again
        return str(exc)
    path = sqlite_path(url)
    if path is not None:
        try:
            now = _identity(path)
        except FileNotFoundError:
            return (
                f"the database file {path} was removed while the UI was open; nothing is shown "
                "until it is back (or start steplog ui --db on the right file)"
            )
        if now != identity and again:  # replaced (restored, copied over): open it afresh
            _store.clear()
            opened.close()
            return store_problem(again=False)
    try:  # emptied or dropped meanwhile (two small queries: alembic_version)
        ensure_schema(opened.engine, auto_migrate=False)
    except SteplogError as exc:
        _store.clear()
        opened.close()
        shown = redact(opened.engine.url.render_as_string(hide_password=False))
        return str(exc).replace(shown, store_url())
    return None


def empty_hint() -> str:
    """What an empty store says: how to seed this store (its ``--db`` included)."""
    url = store_url().replace("`", "")
    seed = f"steplog demo --no-ui --db '{url}'"
    return f"The store has no runs yet. Seed it with `{seed}` (or run a scenario)."


def position() -> int:
    """The store's last position, after folding new events into the read models."""
    current = store()
    refresh(current)
    return current.last_position()


def cached(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(store, *args, **kwargs)``, cached until the log grows."""
    key = (resolve_url(), function.__module__, function.__qualname__, position())
    return _cached(*key, args, tuple(sorted(kwargs.items())))  # type: ignore[no-any-return]


# Every parameter is part of the cache key (Streamlit skips only names starting with "_").
@st.cache_data(show_spinner=False, max_entries=256)
def _cached(
    url: str,
    module: str,
    name: str,
    log_position: int,
    args: tuple[Any, ...],
    kwargs: tuple[tuple[str, Any], ...],
) -> Any:
    import importlib

    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target(store(), *args, **dict(kwargs))


def guard(render: Callable[[], None]) -> None:
    """Run a page; show steplog's errors (bad input, database down) as messages."""
    goto = st.session_state.pop("_goto", None)
    if goto is not None:  # a row picked in a table: open its page in this tab
        st.switch_page(goto[0], query_params=goto[1])
    page = render.__code__.co_filename  # which view is running
    st.session_state["_page"] = page
    came_back(page)
    problem = store_problem()
    if problem is not None:  # one line on every page, and nothing stale under it
        st.error(md(problem))
        return
    try:
        render()
    except SteplogError as exc:
        st.error(md(exc))
    except Exception as exc:  # the database may be gone; say so instead of a traceback
        from sqlalchemy.exc import DBAPIError

        if not isinstance(exc, DBAPIError):
            raise
        reason = str(exc.orig).strip().splitlines()[0]
        if "no such table" in reason or "does not exist" in reason:
            _store.clear()  # the next page run checks the schema again
            st.error(
                md(
                    f"the database {store_url()} has no steplog tables ({reason}): it was "
                    f"emptied or never migrated; run steplog db upgrade --db '{store_url()}'"
                )
            )
        else:
            st.error(md(f"database error: {reason}"))


def pct(value: float | None) -> str:
    """A rate as a percentage, '-' when undefined."""
    return "-" if value is None else f"{value:.1%}"


def md(text: object) -> str:
    """User data made inert for Markdown: no links, images, emphasis or HTML from payloads."""
    return _MARKDOWN.sub(lambda m: "\\" + m.group(0), str(text))


_MARKDOWN = re.compile(r"[\\`*_{}\[\]()#+\-.!|<>~:$]")


def run_link(run_id: str, label: str | None = None) -> str:
    """A markdown link to the run page (the id URL-quoted, the label escaped)."""
    return f"[{md(label or f'Open run {run_id}')}](run?run={quote(run_id, safe='')})"


# Pages, as paths relative to app.py (what st.page_link and st.switch_page resolve).
OVERVIEW = "views/overview.py"
LIBRARY = "views/failures.py"
RUN = "views/run.py"
COMPARE = "views/compare.py"
REPLAY = "views/replay.py"
PAIR = "views/pair.py"


def link(page: str, label: str, **params: str | None) -> None:
    """A link to another page of the app with its state in the URL (same tab, same session)."""
    query = {key: value for key, value in params.items() if value not in (None, "")}
    st.page_link(page, label=label, query_params=query or None)


def param(key: str) -> str | None:
    """A page state value from the URL (``None`` when absent or empty)."""
    value = st.query_params.get(key)
    return value or None


def set_param(key: str, value: str | None) -> None:
    """Put page state into the URL (a new history entry); ``None`` removes it."""
    if value in (None, ""):
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != value:
        st.query_params[key] = value


def text(value: object) -> None:
    """Long user text, shown verbatim with its line breaks, wrapped to the window (never rendered
    as Markdown or HTML)."""
    st.text(str(value))


def number(value: float | None, digits: int = 3) -> str:
    """A figure rounded for reading: ``digits`` significant digits, '-' when undefined."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def go(page: str, **params: str | None) -> None:
    """Open ``page`` with ``params`` on the next run (safe to call from a widget callback).

    ``st.switch_page`` first writes the new parameters into this page's URL (one history
    entry), then opens the page (another). The state of this page is kept so that Back,
    landing on that in-between entry, shows this page as it was (:func:`came_back`).
    """
    wanted = {k: v for k, v in params.items() if v}
    here = {k: st.query_params.get_all(k)[-1] for k in st.query_params}
    st.session_state["_left"] = (st.session_state.get("_page"), wanted, here)
    st.session_state["_goto"] = (page, wanted)


def came_back(page: str) -> None:
    """Back from a page opened by :func:`go` landed here: restore what this page showed.

    ``st.switch_page`` leaves an in-between history entry: this page with the other page's
    parameters (or none). Put back this page's own (while the frontend handles a history
    navigation it replaces the entry, so Forward still works).
    """
    left = st.session_state.get("_left")
    if left is None or left[0] != page:
        return
    current = {key: st.query_params.get(key) for key in st.query_params}
    if current and current != left[1]:  # arrived some other way: a link, a typed URL
        return
    _, wanted, here = st.session_state.pop("_left")
    for key in wanted:
        if key not in here:
            del st.query_params[key]
    for key, value in here.items():
        with suppress(StreamlitAPIException):  # bound to a widget: its state carries it
            st.query_params[key] = value
        st.session_state[key] = _typed(value)
    st.rerun()  # the URL-bound widgets read the restored URL on the next run


def _typed(value: str) -> Any:
    """A URL value as the widget that owns it holds it (page numbers are integers)."""
    return int(value) if value.isdigit() else value


def pickable(
    frame: Any, key: str, on_pick: Callable[[dict[str, Any]], None], **options: Any
) -> None:
    """A table whose rows open on a click anywhere in them; ``on_pick(row)`` runs on a change.

    A click on a cell selects that cell (its row is the pick), a click on the row's checkbox
    selects the row: either opens it. Only a change is acted on, so a selection left over from
    before a back/forward does not undo the navigation.
    """

    def changed() -> None:
        state = st.session_state.get(key)
        row = picked_row(state.selection if state is not None else None)
        if row is not None and row < len(frame):
            on_pick(frame.iloc[row].to_dict())

    st.dataframe(
        frame,
        key=key,
        on_select=changed,
        selection_mode=["single-row", "single-cell"],
        hide_index=True,
        width="stretch",
        **options,
    )


def picked_row(selection: Any) -> int | None:
    """The row a dataframe selection points at: a selected row, else a selected cell's row."""
    if not selection:
        return None
    rows = selection.get("rows") or []
    if rows:
        return int(rows[0])
    cells = selection.get("cells") or []
    return int(cells[0][0]) if cells else None


def url_text(label: str, key: str, **options: Any) -> str:
    """A text input whose value is the URL parameter ``key`` (a change is a history entry).

    Not a URL-bound widget: a bound key is dropped from the URL when a page link leaves the
    page, and two pages (Run detail, Replay) both take ``run`` from their links.
    """
    current = st.query_params.get(key, "")
    page = Path(st.session_state.get("_page", "")).stem  # widget state is per page
    widget, seen = f"_{page}_{key}_input", f"_{page}_{key}_seen"
    if widget not in st.session_state or st.session_state.get(seen) != current:
        # a new page (its widgets start empty), or the URL changed: link, Back, Forward
        st.session_state[widget] = current
        st.session_state[seen] = current

    def changed() -> None:
        value = str(st.session_state[widget]).strip()
        st.session_state[seen] = value
        set_param(key, value)

    return str(st.text_input(label, key=widget, on_change=changed, **options)).strip()


def url_choice(
    where: Any, label: str, key: str, options: list[str], default: str, what: str = ""
) -> str:
    """A selectbox whose value comes from the URL parameter ``key`` (see :func:`keep_in_url`).

    A URL value that is not among ``options`` is replaced by ``default``, with a one-line
    warning that says what was wrong and what is shown instead. ``what`` names the valid
    values (default: the options).
    """
    raw = st.query_params.get(key)
    seen = f"_{Path(st.session_state.get('_page', '')).stem}_{key}_seen"
    if key not in st.session_state or st.session_state.get(seen) != raw:
        # a new page, or the URL changed under the widget: a link, Back, Forward
        value = raw if raw in options else default
        if raw is not None and raw not in options:
            valid = what or "one of " + ", ".join(options)
            st.warning(md(f"{label} {raw!r} in the link is not {valid}; showing {value}."))
        st.session_state[key] = value
    elif st.session_state[key] not in options:
        st.session_state[key] = default
    value = str(where.selectbox(label, options, key=key))
    st.session_state[seen] = value
    return value


def keep_in_url(**values: str) -> None:
    """Write every value into the URL, defaults included, in one history entry: a shared link
    then means the same selection whatever the store holds later."""
    changed = {key: value for key, value in values.items() if st.query_params.get(key) != value}
    if changed:
        st.query_params.update(changed)


_SCROLL = """<script>
(() => {
  const deadline = Date.now() + 10000;
  const scroll = () => {
    const grid = window.parent.document.querySelector(".st-key-%(key)s .dvn-scroller")
      || document.querySelector(".st-key-%(key)s .dvn-scroller");
    if (grid) { grid.scrollTop = Math.max(0, %(row)d - 2) * 35; return; }
    if (Date.now() < deadline) setTimeout(scroll, 100);
  };
  scroll();
})();
</script>"""


def scroll_table_to(key: str, row: int) -> None:
    """Scroll the dataframe in the container with ``key`` so that row ``row`` (0-based) is in
    view (a short script: Streamlit has no scroll position for tables)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", key):
        raise ValueError(f"not a widget key: {key!r}")
    st.html(_SCROLL % {"key": key, "row": int(row)}, unsafe_allow_javascript=True)
