"""Cells of a tool output's tables: what a table is (`Row`, `Table`, read by
store/tabular.py) and a cell's value as a number and its unit (`number`, `unit_of`).

A cell is a number when it reads as one with at most six letters of unit after it
(`1,234.50`, `-11`, `$0.95`, `-18.74 dBm`, `T=35.4 °C`; not dates, times, versions or
addresses). Cells repeat across a session's outputs, so their values are remembered by
text (at most 50,000 at a time).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MIN_ROWS, MIN_VALUES = 6, 5  # lines that make a table; values that make a number column

_NUMBER = re.compile(r"\s*(?:[A-Za-z_][\w.]{0,15}=\s*)?([-+−]?)\s*[$€£]?\s*(\d[\d,]*(?:\.\d+)?)")
_UNIT = re.compile(r"[A-Za-z%°µ/]{0,6}")  # not 2024-08-18, 10.4.2.17, 12:30, 1/1, 5d3h

Row = tuple[tuple[str, ...], list[Any]]  # (probes, cells)
Table = tuple[Sequence[str] | None, list[Row]]  # (header, rows)


def number(cell: Any) -> float | None:
    """A cell's value if it is a number, with a unit of six letters at most after it."""
    if isinstance(cell, bool) or cell is None:
        return None
    if isinstance(cell, int | float):
        return float(cell)
    if not isinstance(cell, str):
        return None
    v = _VALUES.get(cell, _UNREAD)  # a cell is read for its shape, its kind and its end
    if v is _UNREAD:
        if len(_VALUES) >= 50_000:
            _VALUES.clear()
        v = _VALUES[cell] = _number(cell)
    return v


_UNREAD = float("nan")
_VALUES: dict[str, float | None] = {}


def unit_of(cell: Any) -> str | None:
    """The unit a number cell carries, lower-cased (`78.4 °C`: "°c", `$1,250.00`: "$",
    `12%`: "%"), "" for a bare number, None for a cell that is no `number`."""
    if not isinstance(cell, str) or number(cell) is None:
        return None
    m = _NUMBER.match(cell)
    if m is None:  # not reached: `number` matched it
        return None
    lead = next((c for c in cell[:m.start(2)] if c in "$€£"), "")
    return lead or cell[m.end():].strip().lower()


def _number(cell: str) -> float | None:
    m = _NUMBER.match(cell)
    if m is None:
        return None
    if _UNIT.fullmatch(cell[m.end():].strip()) is None:
        return None
    try:
        value = float(m.group(2).replace(",", ""))
    except ValueError:
        return None
    return -value if m.group(1) in ("-", "−") else value
