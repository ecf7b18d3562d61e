"""``python -m steplog.cli``: the same as the ``steplog`` command."""

from . import main

main()
