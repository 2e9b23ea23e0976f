"""Lines of `key=value` pairs as a table: logfmt logs, telemetry frames, a metrics dump.

```
FRAME AURORA-2B t=2024-06-12T02:40:32Z seq=190453 mode=NOMINAL BUS_V=28.18 BUS_I=4.26
FRAME AURORA-2B t=2024-06-12T02:40:42Z seq=190454 mode=NOMINAL BUS_V=27.91 BUS_I=4.31
```

Split at runs of two spaces such a line is one cell, so store/notable.py `tables` saw no
table and "the lowest bus voltage" no column. Each line holding `MIN_PAIRS` pairs or more
is a record of its pairs (a quoted value whole: `msg="disk full"`), when `MIN_RECORDS` lines
or more are, and half the text's lines at least. The keys are the header, in the order
the first lines give them; a record is told apart by the pair, as printed, of its first
key whose values all differ (`t=2024-06-12T02:40:32Z`), which its passage holds.
"""

from __future__ import annotations

import re
from typing import Any

from store.cells import Row

MIN_RECORDS, MIN_PAIRS = 5, 3
# records enough to be a table among other lines: Ecto's `QUERY OK source="invoices"
# db=312.4ms decode=1.9ms` between the SQL it ran and the call site
INTERLEAVED = 20
_PAIR = re.compile(r'(?<![^\s,;])([A-Za-z_][\w.\-/]*)=("[^"]*"|[^\s,;]*)')



def logfmt_records(text: str) -> tuple[list[str], list[Row]] | None:
    """`text`'s lines of key=value pairs as a header and rows, or None."""
    if text.count("=") < MIN_RECORDS * MIN_PAIRS:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    records: list[tuple[dict[str, Any], dict[str, str]]] = []
    for line in lines:
        pairs = _PAIR.findall(line)
        if len(pairs) >= MIN_PAIRS:
            records.append(({k: v.strip('"') for k, v in pairs},
                            {k: f"{k}={v}" for k, v in pairs}))
    if len(records) < MIN_RECORDS or (2 * len(records) < len(lines)
                                      and len(records) < INTERLEAVED):
        return None
    keys = list(dict.fromkeys(k for record, _ in records[:20] for k in record))
    key = next((k for k in keys if all(k in r for r, _ in records)
                and len({r[k] for r, _ in records}) == len(records)), None)
    return keys, [((raw[key],) if key else (), [record.get(k) for k in keys])
                  for record, raw in records]
