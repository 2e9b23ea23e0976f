"""Rows past a limit their own row states: an SPC export's value over its `ucl`, a volume's
`used` over its `quota`, a reading under its `min`.

```
ts,lot,chamber,param,value,ucl,lcl,cl,rule
2024-06-14 04:50:37,K7H383.2,WET01-PM4,CD_CONTACT_nm,46.178,48.420,41.580,45.000,
2024-06-14 05:23:53,N9G381.1,CVD01-PM4,CD_CONTACT_nm,49.165,48.420,41.580,45.000,WE1
```

"The first upper-limit breach" is the first row whose value passes its limit: nothing
else in it stands out (49.165 is no outlier among values near 48), and no column's end
is it. A table has limits when a numeric column's header names one (`LIMIT_NAMES`:
`ucl`, `usl`, `max`, `limit`, `threshold`, `quota`, …; `LOWER_NAMES` below); the value
it bounds is the numeric column named as one (`VALUE_NAMES`), or else the nearest numeric
column left of the limit that names none. The first and the last row past it are
notable `over` (store/notable.py: "breach", "exceeded", "violation"), and every one of
them when they are two at most.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

UPPER = re.compile(r"(?:^|[^a-z])(?:ucl|usl|upper|max|maximum|limit|lim|threshold|thr|quota|"
                   r"cap|ceiling|allowance|allowed|budget)(?:$|[^a-z])", re.I)
LOWER = re.compile(r"(?:^|[^a-z])(?:lcl|lsl|lower|min|minimum|floor)(?:$|[^a-z])", re.I)
VALUE = re.compile(r"(?:^|[^a-z])(?:value|val|actual|measured|measurement|reading|used|usage|"
                   r"current|observed|result)(?:$|[^a-z])", re.I)
ALONE = 2  # past their limits: at most this many rows are all notable, else the first and last

Row = tuple[tuple[str, ...], list[Any]]


def past_limits(header: Sequence[str] | None, rows: list[Row],
                number: Callable[[Any], float | None]) -> Iterator[tuple[str, int]]:
    """(the bounded column's header, row) of the rows whose value passes a limit of their
    own row: the first and the last, or all when `ALONE` at most."""
    if header is None:
        return
    names = [str(h) for h in header]
    if not any(UPPER.search(n) or LOWER.search(n) for n in names):
        return  # most tables: no header names a limit, no column is read
    numeric = [j for j, _ in enumerate(names)
               if sum(number(c[j]) is not None for _, c in rows if j < len(c)) >= 0.7 * len(rows)]
    bounds = [(j, UPPER.search(names[j]) is not None) for j in numeric
              if UPPER.search(names[j]) or LOWER.search(names[j])]
    if not bounds:
        return
    plain = [j for j in numeric if not UPPER.search(names[j]) and not LOWER.search(names[j])]
    named = [j for j in plain if VALUE.search(names[j])]
    left = [j for j in plain if j < bounds[0][0]]
    value = named[0] if named else (left[-1] if left else None)
    if value is None:
        return
    past: list[int] = []
    for i, (_, cells) in enumerate(rows):
        v = number(cells[value]) if value < len(cells) else None
        if v is None:
            continue
        for j, upper in bounds:
            limit = number(cells[j]) if j < len(cells) else None
            if limit is not None and (v > limit if upper else v < limit):
                past.append(i)
                break
    chosen = past if len(past) <= ALONE else [past[0], past[-1]]
    for i in chosen:
        yield names[value], i
