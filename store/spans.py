"""How long each row took between two of its dated columns, and how far one version
column is behind another: columns no table prints.

```
{"accession": "SPHL-24-66055", "collected": "2024-07-16T09:00", "received": "2024-07-25T19:00", …}
ID       PUBLISHED         CORRECTED         DESK
CX-2235  2024-07-31 06:00  2024-08-04 22:00  metro
```

"Which specimen took the longest to get from collection to the lab", "which correction
took the longest between publication and the fix": the answer is the row whose second
date lies furthest after its first, and neither date is an end of its own column. So
each pair of a table's dated columns (`MAX_DATED` of them at most, each `_DAY`-shaped in
70 % of its rows) whose later column comes after the earlier in 90 % of the rows where
both are set makes a column of their differences, named by both and `duration`
(`collected to received duration`): its top and bottom rows are the longest and the
shortest (store/extremes.py `_in_table`).

So does a pair of version columns (`Current 10.0.3`, `Latest 15.0.2`: `bundle outdated`,
`npm outdated`, `pip list --outdated`) whose second is the newer in 90 % of the rows:
`Current to Latest versions behind` counts the major versions between them (a minor
version a thousandth), so "which gem was the most major versions behind" is its top.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from itertools import combinations
from typing import Any

MAX_DATED = 4  # dated (or version) columns looked at: six pairs at most
_DATED = re.compile(r"\s*\d{4}-\d\d-\d\d")
# three parts at least: a column of decimals (`12.50`) is no column of versions
_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.\d+)+(?:[-+.]?[A-Za-z][\w.]*)?\s*$")

Row = tuple[tuple[str, ...], list[Any]]


def spans(header: Sequence[Any], rows: list[Row], day: Callable[[Any], float | None]
          ) -> Iterator[tuple[str, list[tuple[int, float]]]]:
    """(a name, [(row, days between)]) for each pair of dated columns of `header`, the
    second mostly after the first (see the module)."""
    yield from _pairs(header, rows, _DATED, day, "duration")
    yield from _pairs(header, rows, _VERSION, _major, "versions behind")


def _major(cell: Any) -> float | None:
    """A version as its major number and a thousandth of its minor (`10.0.3`: 10.0)."""
    m = _VERSION.match(cell) if isinstance(cell, str) else None
    return None if m is None else int(m.group(1)) + min(int(m.group(2)), 999) / 1000


def _pairs(header: Sequence[Any], rows: list[Row], shape: re.Pattern[str],
           value: Callable[[Any], float | None], what: str
           ) -> Iterator[tuple[str, list[tuple[int, float]]]]:
    """The differences between each pair of `shape`d columns, the second mostly the
    greater, named "<first> to <second> <what>"."""
    def shaped_at(j: int, cells: list[Any]) -> bool:
        return j < len(cells) and isinstance(cells[j], str) and shape.match(cells[j]) is not None

    head = rows[:3]  # a column none of whose first three cells is shaped so is none
    shaped = [j for j in range(len(header)) if any(shaped_at(j, c) for _, c in head)
              and sum(shaped_at(j, c) for _, c in rows) >= 0.7 * len(rows)][:MAX_DATED]
    for a, b in combinations(shaped, 2):
        vals = []
        for i, (_, cells) in enumerate(rows):
            start, end = value(cells[a]), value(cells[b]) if b < len(cells) else None
            if start is not None and end is not None:
                vals.append((i, end - start))
        if len(vals) >= 0.7 * len(rows) and sum(v >= 0 for _, v in vals) >= 0.9 * len(vals):
            yield f"{header[a]} to {header[b]} {what}", vals
