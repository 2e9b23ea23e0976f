"""Notable rows: the rows of a tool output's table that a later question asks about in
plain words, found without the question.

What a later question asks of a table is often its odd one out: the one negative stock
count, the vendor whose 90+ balance dwarfs every other, the only non-zero difference in
a reconciliation, a price far under the rest. The question names the oddity ("which item
was below zero", "the biggest amount past due"), not the row's identifier, and nothing
in the row says "biggest". So such a row's passage also counts its kind's tag (`TAGS`,
a term no text yields) in the lexical index, and a question's words that name a kind
(`WORDS`, `asked`: store/notablewords.py) add its tag to the query
(store/relevance.py: `RelevanceIndex.examine`, `notable_terms`); the passage's text is
unchanged, and a step that is no question never matches a tag.

The tables are store/tabular.py's, their cells' numbers store/cells.py's. A column
counts when at least five of its cells, and 70 % of its rows, are numbers (`1,234.50`,
`-11`, `$0.95`, `-18.74 dBm`, `T=35.4 °C`; not dates, times, versions or addresses). In
such a column a row is notable when it is
- `negative`: one of at most two negative values, a fifth of the column at most;
- `nonzero`: one of at most two values that are not zero, where 80 % are;
- `highest`: over 2.5 times the next (all values zero or more), or, in eight values or
  more, `SPREAD` median absolute deviations above the median and twice as far from it
  as the next (a reading of 35.4 where the rest hold 37.0 +- 0.2 is the `lowest`);
- `lowest`: under a fifth of the next (all values above zero), or as far below.
- `jump`: (six rows or more, in their order) the row at the top of a step over `JUMP`
  times the next largest: the hop where a traceroute's delay climbs 63 ms;
- `over`: past a limit its own row states (a value over its `ucl`, usage over its
  `quota`): the first and the last such row (store/limits.py).
A column whose values read apart from its siblings' (`PROP_CBH_3A_T` at 70 beside seven
at 120) is `odd` too, on the passage that names it (store/siblings.py).
In any column, numbers or not, a row is `odd` when its cell differs in shape (digits
aside, a number as any number, a list or record as empty or not) from the shape 80 % of
the column share, one or two rows and a fifth of them at most: the FAIL among PASSes,
the instance whose `"Tags"` is `[]`, the line that reads `ALARM door open` where the
others read `RH=88%`; or, a text cell as written, from the value they share (`17.2.5`
among `17.2.7`, `0/1` among `1/1`), or an image or package reference by its tag (the
`…/checkout-webhooks:v4.17.9` among `…:v4.18.2`, every name its own). A question
asks for one in words such as "problem", "failed", "missing", "older", "no ... label",
"a different build", "instead of finishing", "wouldn't load", "got rejected" ("didn't
add up" a difference left, "overpaid" a negative, "far more than the rest" the
highest); a superlative
("the slowest", "the longest") asks for the highest and the lowest alike, the column
telling which (store/extremes.py finds a named column's top and bottom rows, outliers
or not).
At most `MAX_ROWS` rows of an output are notable (a row odd in three columns is one): a
table full of oddities has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol, TypeVar

from store.cells import MIN_ROWS, MIN_VALUES, Row, Table, number
from store.limits import past_limits
from store.notablewords import TAGS
from store.siblings import odd_columns
from store.tabular import tables

MAX_ROWS = 6  # notable rows of one output at most: a table full of oddities has none
JUMP = 4  # times the next largest step between rows
SPREAD = 8  # median absolute deviations from the median: a value that stands alone


@dataclass(frozen=True, slots=True)
class Notable:
    kind: str  # a key of store/notablewords.py's WORDS
    column: str  # its header ("" when the table has none)
    probes: tuple[str, ...]  # what the passage holding the row holds (its line; a record's)


def notable(text: str, found: list[Table] | None = None) -> list[Notable]:
    """The notable rows of `text`'s tables (see the module), at most MAX_ROWS; `found`:
    its tables, already parsed (`tables`)."""
    out: dict[Notable, None] = {}  # once (columns without a header have one name)
    for header, rows in tables(text) if found is None else found:
        out.update(dict.fromkeys(_in_table(header, rows)))
    return list(out) if len({n.probes for n in out}) <= MAX_ROWS else []


def _in_table(header: Sequence[str] | None, rows: list[Row]) -> Iterator[Notable]:
    width = max(len(cells) for _, cells in rows)
    for j in range(width):
        name = str(header[j]) if header is not None and j < len(header) else ""
        for i in _odd_shapes([cells[j] if j < len(cells) else None for _, cells in rows]):
            yield Notable("odd", name, rows[i][0])
    numeric = list(numeric_columns(header, rows))
    for name, vals in numeric:
        for kind, i in _odd(vals):
            yield Notable(kind, name, rows[i][0])
    if header is None:  # limits and siblings are named by a header
        return
    for name, i in past_limits(numeric):
        yield Notable("over", name, rows[i][0])
    for name in odd_columns(numeric):  # the one cold sensor of eight
        yield Notable("odd", name, (name,))


def numeric_columns(header: Sequence[str] | None, rows: list[Row],
                    value: Callable[[Any], float | None] = number,
                    ) -> Iterator[tuple[str, list[tuple[int, float]]]]:
    """(its header, [(row, value)]) of each column whose cells are `value`s (five at
    least, and 70 % of its rows)."""
    width = max(len(cells) for _, cells in rows)
    for j in range(width):
        if all(value(cells[j]) is None for _, cells in rows[:MIN_VALUES] if j < len(cells)):
            continue  # a column of text (most are): 70 % numbers would show in its first five
        vals = [(i, v) for i, (_, cells) in enumerate(rows) if j < len(cells)
                for v in (value(cells[j]),) if v is not None]
        if len(vals) < MIN_VALUES or len(vals) < 0.7 * len(rows):
            continue
        yield (str(header[j]) if header is not None and j < len(header) else ""), vals


def _odd(vals: list[tuple[int, float]]) -> Iterator[tuple[str, int]]:
    """(kind, row) of a column's odd values."""
    n = len(vals)
    neg = [i for i, v in vals if v < 0]
    if 0 < len(neg) <= min(2, n // 5):
        yield from (("negative", i) for i in neg)
        return
    nonzero = [i for i, v in vals if v != 0]
    if 0 < len(nonzero) <= 2 and n - len(nonzero) >= 0.8 * n:
        yield from (("nonzero", i) for i in nonzero)
        return
    order = sorted(vals, key=lambda iv: iv[1])
    (lo, low), (_, low2) = order[0], order[1]
    (_, high2), (hi, high) = order[-2], order[-1]
    mid = order[n // 2][1]
    mad = sorted(abs(v - mid) for _, v in vals)[n // 2] if n >= 8 else 0.0
    if (low >= 0 and high2 > 0 and high > 2.5 * high2) or (
            mad > 0 and high - mid >= SPREAD * mad and high - mid >= 2 * (high2 - mid)):
        yield "highest", hi
    if (low > 0 and low < 0.2 * low2) or (
            mad > 0 and mid - low >= SPREAD * mad and mid - low >= 2 * (mid - low2)):
        yield "lowest", lo
    if n >= MIN_ROWS:  # in row order: the one step that dwarfs every other
        steps = sorted((abs(b[1] - a[1]), b[0]) for a, b in pairwise(vals))
        if steps[-1][0] > JUMP * steps[-2][0]:
            yield "jump", steps[-1][1]


_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")
_SHAPES: dict[str, str] = {}  # a short text cell's digits as 9s -> its shape (they repeat)


def _shape(cell: Any) -> str:
    if isinstance(cell, str):
        bare = _DIGITS.sub("9", cell.strip())
        shape = _SHAPES.get(bare)
        if shape is None:  # a number's sign and size are the value rules' to judge
            shape = "9" if number(bare) is not None else bare
            if len(bare) <= 64:  # a long one is a note or a message: kept, it would pile up
                if len(_SHAPES) >= 50_000:
                    _SHAPES.clear()
                _SHAPES[bare] = shape
        return shape
    if cell is None or isinstance(cell, bool):
        return str(cell)
    if isinstance(cell, int | float):
        return "9"
    if isinstance(cell, list | dict):
        return "[]" if not cell else "[x]" if isinstance(cell, list) else "{x}"
    return "?"


def _odd_shapes(cells: list[Any]) -> list[int]:
    """The rows (one or two, a fifth at most) whose cell differs in shape (digits aside)
    from the one shape 80 % of the column's cells share: the FAIL among PASSes, the
    empty list of tags, the line that reads ALARM where the others read RH=88%. The
    first five cells tell most columns apart (ids, names, amounts): no shape three times
    among them, no common one. Where shapes differ too often, by the first word
    (`_first_word`): the one REJECTED among VERIFIED and "VERIFIED (late)"."""
    odd = _odd_by(cells, _shape) or (_odd_by(cells, _first_word) if all(
        isinstance(c, str) and _LETTERS.match(c.lstrip()) for c in cells[:5]) else [])
    more = sorted({*odd, *_odd_by(cells, _value), *_odd_by(cells, _tag)})
    return more if len(more) <= min(2, len(cells) // 5) else odd


def _value(cell: Any) -> str:
    """A text cell as written (`v4.17.9` among `v4.18.2`, `1/2` among `2/2`); a number's,
    or any other cell's, shape."""
    if isinstance(cell, str) and number(cell) is None:
        return cell.strip()
    return _shape(cell)


_TAG = re.compile(r"[/@]\S*:([^\s/:]+)\s*$")


def _tag(cell: Any) -> str:
    """An image or package reference's tag (`v4.17.9-hotfix1` of
    `…/checkout-webhooks:v4.17.9-hotfix1`); any other cell's shape."""
    if isinstance(cell, str) and (m := _TAG.search(cell)) is not None:
        return m.group(1)
    return _shape(cell)


def _first_word(cell: Any) -> str:
    """A text cell's first word (`VERIFIED` of "VERIFIED (late)"); a number's, or any other
    cell's, shape."""
    if isinstance(cell, str) and (m := _LETTERS.search(cell)) is not None and m.start() < 2:
        return m.group()
    return _shape(cell)


_LETTERS = re.compile(r"[A-Za-z]+")


def _odd_by(cells: list[Any], key: Callable[[Any], str]) -> list[int]:
    n = len(cells)
    most = min(2, n // 5)
    head = [key(c) for c in cells[:5]]
    common = max(head, key=head.count)
    if head.count(common) < len(head) - most:
        return []
    odd = [i for i, h in enumerate(head) if h != common]
    for i in range(len(head), n):
        if key(cells[i]) != common:
            odd.append(i)
            if len(odd) > most:
                return []
    return odd


class Probed(Protocol):
    @property
    def probes(self) -> tuple[str, ...]: ...


P = TypeVar("P", bound=Probed)


def placed(found: list[P], pieces: Sequence[str]) -> dict[int, list[P]]:
    """Piece number -> its notable rows (or a column's ends: store/extremes.py): each goes
    to the first piece holding all its probes (a row without probes goes nowhere)."""
    out: dict[int, list[P]] = {}
    for row in found:
        k = next((k for k, p in enumerate(pieces) if all(q in p for q in row.probes)), None)
        if k is not None and row.probes:
            out.setdefault(k, []).append(row)
    return out


def row_terms(rows: list[Notable]) -> list[str]:
    """What rows add to their passage's terms: each one's tag. Only a question that names
    a tag matches one, and it examines every chunk first, so no other query's scores
    depend on how far the background got (a header's words added too would)."""
    return [TAGS[row.kind] for row in rows]


def said(rows: list[Notable]) -> str:
    """Rows as recall's reason names them: "highest 90+, negative available"."""
    return ", ".join(f"{row.kind} {row.column}".strip() for row in rows)
