"""The user guides, shipped inside the package as Markdown (``steplog guide TOPIC`` prints one).

Each guide is one file in this folder; the README links to them and the docs test runs every
command they show. Nothing here imports anything heavy: reading a guide is a file read.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["read", "title", "topics"]


def topics() -> list[str]:
    """Every guide's topic name (its file name without ``.md``), sorted."""
    return sorted(
        entry.name.removesuffix(".md")
        for entry in files(__name__).iterdir()
        if entry.name.endswith(".md")
    )


def read(topic: str) -> str:
    """The Markdown text of one guide; ``KeyError`` names the topics when there is no such one."""
    name = topic.removesuffix(".md").lower()
    if name not in topics():
        raise KeyError(f"no guide {topic!r}; the guides are: {', '.join(topics())}")
    return files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def title(topic: str) -> str:
    """A guide's first heading, without the ``#``."""
    for line in read(topic).splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return topic
