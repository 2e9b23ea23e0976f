"""Lines that each name a file as a table of one column, `file`: a test runner's failed
examples, grep -n's matches, a compiler's or a linter's findings.

```
rspec ./spec/requests/api/v3/timesheets_spec.rb:166 # Timesheet POST … returns 422
rspec ./spec/policies/usage_record_policy_spec.rb:185 # UsageRecord #to_pdf …
FAILED tests/test_export.py::test_totals - AssertionError: 3 != 4
app/models/payment.rb:241:5: C: Style/GuardClause: Use a guard clause
```

"Which spec file accounted for the most failures" counts such lines by file: the answer
is the file most lines name (store/extremes.py `modes`, tag `~top:file`), which no line
says and nothing else in the output singles out. A row is a line that opens (no
indentation: a backtrace's frames are indented) with a path, after one word at most
(`rspec`, `FAILED`, `modified:`); the path has a directory or a line number after it
(`a.rb:12`), so a word with a dot in prose is none. `MIN_LINES` such lines or more make a
table; a row is told apart by its line's start as printed (`rspec ./spec/a_spec.rb:166`, not
a backtrace's frame of the same path), which its passage holds.
"""

from __future__ import annotations

import re

from store.cells import Row

MIN_LINES = 6
_PATH_LINE = re.compile(
    r"^(?:[A-Za-z][\w-]*:?[ \t]+)?"  # one word before it at most: rspec, FAILED, modified:
    r"(?:\.{1,2}/)?([\w.-]+(?:/[\w.-]+)*\.[A-Za-z][\w]{0,7})(:\d+)?"  # the path, :line
    r"(?=::|:|\s|$)", re.M)



def path_lines(text: str) -> tuple[list[str], list[Row]] | None:
    """`text`'s lines that open with a file's path, as the header `["file"]` and rows of
    the path without `./` (nor its line), or None when fewer than `MIN_LINES` do or they
    name one file only."""
    if text.count("\n") < MIN_LINES - 1:
        return None
    rows: list[Row] = []
    for m in _PATH_LINE.finditer(text):
        path, line = m.group(1), m.group(2)
        if line or "/" in path:
            rows.append(((m.group(0),), [path]))
    if len(rows) < MIN_LINES or len({cells[0] for _, cells in rows}) < 2:
        return None
    return ["file"], rows
