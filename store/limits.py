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
from collections.abc import Iterator, Sequence

UPPER = re.compile(r"(?:^|[^a-z])(?:ucl|usl|upper|max|maximum|limit|lim|threshold|thr|quota|"
                   r"cap|ceiling|allowance|allowed|budget)(?:$|[^a-z])", re.I)
LOWER = re.compile(r"(?:^|[^a-z])(?:lcl|lsl|lower|min|minimum|floor)(?:$|[^a-z])", re.I)
VALUE = re.compile(r"(?:^|[^a-z])(?:value|val|actual|measured|measurement|reading|used|usage|"
                   r"current|observed|result)(?:$|[^a-z])", re.I)
ALONE = 2  # past their limits: at most this many rows are all notable, else the first and last


def past_limits(numeric: Sequence[tuple[str, list[tuple[int, float]]]]
                ) -> Iterator[tuple[str, int]]:
    """(the bounded column's header, row) of the rows whose value passes a limit of their
    own row: the first and the last, or all when `ALONE` at most. `numeric`: a table's
    numeric columns, (header, [(row, value)]) (store/notable.py `numeric_columns`)."""
    if not any(UPPER.search(name) or LOWER.search(name) for name, _ in numeric):
        return  # most tables: no header names a limit
    bounds = [(dict(vals), UPPER.search(name) is not None) for name, vals in numeric
              if UPPER.search(name) or LOWER.search(name)]
    plain = [(name, vals) for name, vals in numeric
             if not UPPER.search(name) and not LOWER.search(name)]
    first_bound = next(i for i, (name, _) in enumerate(numeric)
                       if UPPER.search(name) or LOWER.search(name))
    named = [c for c in plain if VALUE.search(c[0])]
    left = [c for c in plain if numeric.index(c) < first_bound]
    column = named[0] if named else (left[-1] if left else None)
    if column is None:
        return
    name, vals = column
    past = [i for i, v in vals
            if any((limit := bound.get(i)) is not None and (v > limit if upper else v < limit)
                   for bound, upper in bounds)]
    for i in past if len(past) <= ALONE else [past[0], past[-1]]:
        yield name, i
