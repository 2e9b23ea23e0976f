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
from collections.abc import Iterator, Sequence
from statistics import median

MIN_SIBLINGS = 4
SPREAD = 8  # as store/notable.py's for a value in its column
_NUMBERED = re.compile(r"\d+[A-Za-z]?(?=[_\W]|$)")


def odd_columns(numeric: Sequence[tuple[str, list[tuple[int, float]]]]) -> Iterator[str]:
    """The name of each column that reads apart from its siblings (see the module);
    `numeric`: a table's numeric columns (store/notable.py `numeric_columns`)."""
    families: dict[str, list[tuple[str, float]]] = {}
    for name, vals in numeric:
        key = _NUMBERED.sub("#", name)
        if key != name:
            families.setdefault(key, []).append((name, median(v for _, v in vals)))
    for members in families.values():
        if len(members) < MIN_SIBLINGS:
            continue
        mid = median(m for _, m in members)
        off = sorted(((abs(m - mid), name) for name, m in members), reverse=True)
        spread = max(median(d for d, _ in off), abs(mid) / 100)
        if spread > 0 and off[0][0] >= SPREAD * spread and off[0][0] >= 2 * off[1][0]:
            yield off[0][1]
