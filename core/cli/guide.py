"""``steplog guide``: the user guides, read from the installed package."""

from typing import Annotated

import typer

from ..errors import SteplogError
from ._shared import app, console


@app.command("guide")
def guide(
    topic: Annotated[
        str | None, typer.Argument(help="The guide to print; without it, the list of guides.")
    ] = None,
) -> None:
    """Read a guide: `steplog guide` lists them, `steplog guide replay` prints one."""
    from .. import guide as guides

    if topic is None:
        for name in guides.topics():
            console.print(f"{name:<16} {guides.title(name)}", highlight=False)
        return
    try:
        text = guides.read(topic)
    except KeyError as exc:
        raise SteplogError(str(exc.args[0])) from None
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(text))
    else:
        console.print(text, highlight=False, soft_wrap=True)
