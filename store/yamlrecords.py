"""A YAML list of records as a table: `kubectl get -o yaml`'s items, a certificate
inventory, an Ansible inventory, a config's list of upstreams.

```
certificates:
- cn: m.shopfront.example
  serial: "29:D2:1C:62:D8:75:A4:85"
  not_after: 2024-10-19
  deployed_pops: 8
```

Each `- key: value` line at one indent opens a record; the `key: value` lines two spaces
deeper are its fields. A field without a value (a nested map or list) or a block scalar
is no column. The longest such list of `MIN_RECORDS` or more is the table (store/
tabular.py `tables`), so its numeric and dated columns have ends and odd rows as a JSON
list's do. A record is told apart by the line of its first field whose values all differ
and are no flow list or map, as printed (`serial: "29:D2:…"`), which its passage holds.

No YAML library: a line scan reads the one shape that matters here, fast, and what it
cannot read (flow maps, anchors, multi-line values) it leaves alone.
"""

from __future__ import annotations

import re
from typing import Any

from store.cells import Row

MIN_RECORDS = 5
_OPENS = re.compile(r"^( *)- ([A-Za-z_][\w.-]*):(?: +(.*))?$", re.MULTILINE)
_FIELD = re.compile(r"^( *)([A-Za-z_][\w.-]*):(?: +(.*))?$")
_BLOCK = frozenset("|>")



def yaml_records(text: str) -> tuple[list[str], list[Row]] | None:
    """The longest YAML list of records in `text` as a header and rows, or None."""
    if len(_OPENS.findall(text)) < MIN_RECORDS:  # one scan: most outputs are no YAML
        return None
    best: list[tuple[dict[str, Any], dict[str, str]]] = []
    run: list[tuple[dict[str, Any], dict[str, str]]] = []
    indent = -1
    for line in text.splitlines():
        opened = _OPENS.match(line)
        if run and _ends(line, opened, indent):  # another may follow
            best, run, indent = max(best, run, key=len), [], -1
        if opened is not None and indent in (-1, len(opened.group(1))):
            indent = len(opened.group(1))
            run.append(({}, {}))
            _field(run[-1], opened.group(2), opened.group(3), line)
        elif run and (field := _FIELD.match(line)) is not None and (
                len(field.group(1)) == indent + 2):
            _field(run[-1], field.group(2), field.group(3), line)
    best = max(best, run, key=len)
    if len(best) < MIN_RECORDS:
        return None
    keys = list(dict.fromkeys(k for record, _ in best[:20] for k in record))
    key = next((k for k in keys if len({r.get(k) for r, _ in best}) == len(best)
                and all(k in r and r[k][:1] not in ("[", "{") for r, _ in best)), None)
    return keys, [((raw[key],) if key else (), [record.get(k) for k in keys])
                  for record, raw in best]


def _ends(line: str, opened: re.Match[str] | None, indent: int) -> bool:
    """`line` ends the list at `indent`: an outer list's item, or text no deeper."""
    if opened is not None:
        return len(opened.group(1)) < indent
    return bool(line.strip()) and len(line) - len(line.lstrip()) <= indent


def _field(record: tuple[dict[str, Any], dict[str, str]], key: str, value: str | None,
           line: str) -> None:
    if value is None or value[:1] in _BLOCK or value.startswith("#"):
        return
    v = value.split(" #")[0].strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        v = v[1:-1]
    record[0][key] = v
    record[1][key] = line.strip().removeprefix("- ")
