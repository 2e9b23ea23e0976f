"""A column that reads apart from its siblings: the one sensor of eight that is cold.

```
time_utc,PROP_CBH_1A_T,PROP_CBH_1B_T,PROP_CBH_2A_T,PROP_CBH_2B_T,PROP_CBH_3A_T,…
2024-06-17T00:05:00Z,120.9,123.4,120.8,119.3,70.6,…
```

"Which catalyst-bed heater reading was the odd one out": the answer is a column's name,
and no row of it stands out (each row holds the same cold 70.6 beside 120s). Columns
whose names differ only by a number and a letter after it (`PROP_CBH_#_T`, `disk#_util`,
`core#`) are siblings, `MIN_SIBLINGS` at least; the one whose median lies `SPREAD` median
absolute deviations of their medians (a hundredth of their median at least) from theirs,
and twice as far as any other, is `odd`, on the passage that first names it (the header).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from statistics import median
from typing import Any

MIN_SIBLINGS = 4
SPREAD = 8  # as store/notable.py's for a value in its column
_NUMBERED = re.compile(r"\d+[A-Za-z]?(?=[_\W]|$)")

Row = tuple[tuple[str, ...], list[Any]]


def odd_columns(header: Sequence[Any] | None, rows: list[Row],
                number: Callable[[Any], float | None]) -> Iterator[str]:
    """The name of each column that reads apart from its siblings (see the module)."""
    if header is None:
        return
    families: dict[str, list[tuple[str, float]]] = {}
    for j, name in enumerate(str(h) for h in header):
        key = _NUMBERED.sub("#", name)
        if key == name:
            continue
        vals = [v for _, cells in rows if j < len(cells)
                for v in (number(cells[j]),) if v is not None]
        if len(vals) >= 0.7 * len(rows) and vals:
            families.setdefault(key, []).append((name, median(vals)))
    for members in families.values():
        if len(members) < MIN_SIBLINGS:
            continue
        mid = median(m for _, m in members)
        off = sorted(((abs(m - mid), name) for name, m in members), reverse=True)
        spread = max(median(d for d, _ in off), abs(mid) / 100)
        if spread > 0 and off[0][0] >= SPREAD * spread and off[0][0] >= 2 * off[1][0]:
            yield off[0][1]
