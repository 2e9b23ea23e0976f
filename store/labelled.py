"""Lines of readings that name themselves: `avg 36 km/h  gust 57 km/h  dir 298°`.

A weather station's log, a sensor dump or a shift board often prints no header and says
each reading's name beside its value instead:

```
05:02 Lac 2160       avg 36 km/h  gust 57 km/h  dir 298°
05:08 Pramouton 2550 avg 26 km/h  gust 70 km/h  dir 293°
```

Split at runs of two spaces its lines fall into cells of different counts (a long name
leaves one space before `avg`), so store/tabular.py `tables` saw short runs of rows, each
headed by its first line, and "the strongest gust" no column. Like store/logfmt.py's
`key=value` pairs, each `<label> <number>[ unit]` of a line is a reading; a label that
`SHARE` of the lines hold (two such labels at least, in `MIN_LINES` lines and half the
text's) names a column, and the line (its probe) is the row.
"""

from __future__ import annotations

import re
from collections import Counter

from store.cells import Row

MIN_LINES, MIN_LABELS = 5, 2
SHARE = 0.8  # of the lines that hold a label, for it to name a column
# a label, its number and a unit (not the next label: `2550 avg 26 km/h`)
_READING = re.compile(r"(?<![^\s,;(])([A-Za-z][A-Za-z_%-]{0,15}):? ([-+]?\d[\d,]*(?:\.\d+)?"
                      r"(?: ?[A-Za-z%°µ/]{1,6}(?! ?[-+]?\d))?)(?![\w.:/-])")


def readings(text: str) -> tuple[list[str], list[Row]] | None:
    """`text`'s lines of named readings as a header and rows, or None."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < MIN_LINES:
        return None
    found = [{k.lower(): v for k, v in _READING.findall(line)} for line in lines]
    counts = Counter(k for f in found for k in f)
    labels: list[str] = [k for k, n in counts.items() if n >= SHARE * len(lines)]
    if len(labels) < MIN_LABELS:
        return None
    rows: list[Row] = [((line,), [f.get(k) for k in labels])
                       for line, f in zip(lines, found, strict=True)
                       if all(k in f for k in labels)]
    if len(rows) < MIN_LINES or 2 * len(rows) < len(lines):
        return None
    return labels, rows
