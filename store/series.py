"""A metrics query's time series as rows: Prometheus's `query_range` answer.

```
{"status":"success","data":{"resultType":"matrix","result":[
  {"metric":{"__name__":"ceph_osd_apply_latency_ms","ceph_daemon":"osd.47"},
   "values":[[1716249600,"26.251"],[1716249900,"13.909"],[1716254100,"1873.000"],…]},…]}}
```

Its records are the series, one a label set, and their samples sit in a list of
`[time, "value"]` pairs that no column reads. "The single highest apply-latency value in
that metrics query" found no column. Each sample is now a row of its own: the series'
labels (`metric.ceph_daemon`), `time`, and the value in the samples' own column
(`values`). Its probe is the value as the JSON writes it (`"1873.000"`). An instant
query's one `[time, "value"]` sample is already its record's value
(store/tabular.py `_flat`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from store.cells import Row

MIN_SAMPLES = 5  # samples in all, at least


def sampled(records: list[dict[str, Any]], numeric: Callable[[Any], float | None]
            ) -> str | None:
    """The field of `records` that holds each one's samples (a list of [time, value]
    pairs, `MIN_SAMPLES` in all at least), or None: they are a metrics query's series."""
    key = next((k for k in records[0] if all(_pairs(r.get(k), numeric) for r in records)),
               None)
    if key is None or sum(len(r[key]) for r in records) < MIN_SAMPLES:
        return None
    return key


def samples(records: list[dict[str, Any]], numeric: Callable[[Any], float | None]
            ) -> tuple[list[str], list[Row]] | None:
    """(header, rows) of the series `records` (flattened: store/tabular.py `_flat`) with
    one row a sample; None when they are no series (`sampled`)."""
    key = sampled(records, numeric)
    if key is None:
        return None
    labels = [k for k in dict.fromkeys(k for r in records[:20] for k in r)
              if k != key and not isinstance(records[0].get(k), dict | list)]
    rows: list[Row] = [((orjson.dumps(v).decode(),), [*(r.get(k) for k in labels), t, v])
                       for r in records for t, v in r[key]]
    return [*labels, "time", key], rows


def _pairs(value: Any, numeric: Callable[[Any], float | None]) -> bool:
    return isinstance(value, list) and len(value) >= 2 and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], int | float)
        and numeric(p[1]) is not None for p in value)
