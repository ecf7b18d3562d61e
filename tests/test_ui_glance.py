"""Issue 36 through AppTest: rows that open, compare URLs that keep their meaning, the fatal
step first, a missing or unmigrated database said on every page."""

from __future__ import annotations


from steplog.ui.common import picked_row


def test_a_picked_cell_or_row_names_the_row() -> None:
    assert picked_row(None) is None
    assert picked_row({"rows": [], "columns": [], "cells": []}) is None
    assert picked_row({"rows": [3], "cells": []}) == 3
    assert picked_row({"rows": [], "cells": [[4, "message"]]}) == 4
    assert picked_row({"rows": [], "cells": [(0, "run_id")]}) == 0
