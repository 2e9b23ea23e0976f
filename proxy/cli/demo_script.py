"""The scripted coding-agent session `ctxwarden demo` plays (data only).

An agent fixes a rounding bug: it reads an ADR early (the fact a late question needs),
runs tests (long outputs), tries a patch that does not apply and a wrong fix (a failed
branch: errors and a traceback), greps, fixes, re-runs, and is finally asked about the
ADR. On the demo route (window 1200) the early outputs are evicted long before the last
question, so answering it needs recall. The agent's moves are scripted; the route's mock
answers are printed but never steer the script.
"""

from __future__ import annotations

from dataclasses import dataclass

SYSTEM = ("You are a coding agent working in the repository acme-pay. Use the tools to read "
          "files, run tests and apply patches. Keep changes minimal.")
GOAL = ("Some partial refunds in acme-pay are off by one cent. Make tests/test_refunds.py "
        "pass without changing the tests.")

ADR = """# ADR-012: Refund rounding

Status: accepted (2025-03-14). Context: refunds were computed with float arithmetic and
Python's round(), which rounds half to even on binary floats and loses cents on amounts
such as 10.005. Finance reconciles refunds against the card network to the cent.

Decision (ADR-012): refunds use Decimal and round HALF_UP to the cent; the partial-refund
fee is 0.35 EUR, waived for disputes. Tracked in ticket PAY-4417."""

FAILING_TESTS = """============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0
rootdir: /repo/acme-pay
collected 4 items

tests/test_refunds.py ..FF                                                 [100%]

=================================== FAILURES ===================================
___________________________ test_partial_refund_cent ___________________________

    def test_partial_refund_cent():
        order = make_order(total="10.01", currency="EUR")
>       assert partial_refund(order, share="0.5") == Decimal("5.01")
E       AssertionError: assert Decimal('5.00') == Decimal('5.01')
E        +  where Decimal('5.00') = partial_refund(<Order 7781 EUR 10.01>, share='0.5')

tests/test_refunds.py:22: AssertionError
___________________________ test_refund_with_fee_cents __________________________

    def test_refund_with_fee_cents():
        order = make_order(total="20.05", currency="EUR")
>       assert partial_refund(order, share="0.3", fee=True) == Decimal("5.67")
E       AssertionError: assert Decimal('5.66') == Decimal('5.67')

tests/test_refunds.py:31: AssertionError
=========================== short test summary info ============================
FAILED tests/test_refunds.py::test_partial_refund_cent - AssertionError
FAILED tests/test_refunds.py::test_refund_with_fee_cents - AssertionError
========================= 2 failed, 2 passed in 0.19s =========================="""

SOURCE = '''"""Refund amounts for orders (see docs/adr)."""
from decimal import Decimal

from acme_pay.models import Order

FEE = Decimal("0.35")


def partial_refund(order: Order, share: str, fee: bool = False) -> Decimal:
    """The amount to refund for `share` of the order, minus the fee when charged."""
    amount = float(order.total) * float(share)
    if fee:
        amount -= float(FEE)
    return Decimal(str(round(amount, 2)))


def full_refund(order: Order) -> Decimal:
    return Decimal(order.total)


def refundable(order: Order) -> bool:
    return order.status in ("paid", "shipped") and not order.disputed
'''

BAD_PATCH_ERROR = """error: patch failed: src/acme_pay/refunds.py:14
error: src/acme_pay/refunds.py: patch does not apply
exit code 1"""

WRONG_FIX_RUN = """============================= test session starts ==============================
collected 4 items

tests/test_refunds.py FFFF                                                 [100%]

=================================== FAILURES ===================================
Traceback (most recent call last):
  File "/repo/acme-pay/src/acme_pay/refunds.py", line 14, in partial_refund
    return amount.quantize(Decimal("0.01"))
AttributeError: 'float' object has no attribute 'quantize'
FAILED tests/test_refunds.py::test_full_refund - AttributeError
FAILED tests/test_refunds.py::test_partial_refund_cent - AttributeError
FAILED tests/test_refunds.py::test_refund_with_fee_cents - AttributeError
FAILED tests/test_refunds.py::test_refundable - AttributeError
============================== 4 failed in 0.21s ==============================="""

GREP = """\
src/acme_pay/invoices.py:18:    total = sum(x.amount for x in lines).quantize(CENT, ROUND_HALF_UP)
src/acme_pay/invoices.py:3:from decimal import ROUND_HALF_UP, Decimal
src/acme_pay/invoices.py:7:CENT = Decimal("0.01")
src/acme_pay/payouts.py:41:    return (gross - fees).quantize(CENT, rounding=ROUND_HALF_UP)
src/acme_pay/payouts.py:2:from acme_pay.invoices import CENT
src/acme_pay/tax.py:22:    vat = (net * rate).quantize(CENT, ROUND_HALF_UP)
src/acme_pay/tax.py:58:    return (gross / (1 + rate)).quantize(CENT, ROUND_HALF_UP)
src/acme_pay/fx.py:90:    return (amount * rate).quantize(CENT, ROUND_HALF_UP)"""

GOOD_PATCH = """--- a/src/acme_pay/refunds.py
+++ b/src/acme_pay/refunds.py
@@ -9,7 +9,8 @@
     amount = Decimal(order.total) * Decimal(share)
     if fee:
         amount -= FEE
-    return Decimal(str(round(amount, 2)))
+    return amount.quantize(CENT, ROUND_HALF_UP)"""

PASSING_TESTS = """============================= test session starts ==============================
collected 4 items

tests/test_refunds.py ....                                                 [100%]

============================== 4 passed in 0.18s ==============================="""

LATE_QUESTION = ("Good, tests pass. Before I merge: the changelog must cite ADR-012. Which "
                 "ticket tracks it, and what does it say about the partial-refund fee?")


@dataclass(frozen=True, slots=True)
class Step:
    """One request: the agent's move (a tool call and its output) or a user message."""

    label: str
    tool: str | None = None
    args: str = "{}"
    output: str = ""
    user: str | None = None
    note: str | None = None  # assistant text first: beside the call, or its answer before
    #                          the user speaks again


STEPS: tuple[Step, ...] = (
    Step("goal", user=GOAL),
    Step("read the ADR", "read_file", '{"path": "docs/adr/ADR-012-refund-rounding.md"}', ADR),
    Step("run the tests", "run_tests", '{"path": "tests/test_refunds.py"}', FAILING_TESTS),
    Step("read the code", "read_file", '{"path": "src/acme_pay/refunds.py"}', SOURCE),
    Step("patch that does not apply", "apply_patch", '{"patch": "@@ -14 +14 @@ quantize"}',
         BAD_PATCH_ERROR, note="Floats lose the cent; I'll switch to quantize."),
    Step("a wrong fix", "run_tests", '{"path": "tests/test_refunds.py"}', WRONG_FIX_RUN,
         note="Edited the return line by hand; re-running the tests."),
    Step("how does the code round", "grep", '{"pattern": "quantize", "path": "src/"}', GREP,
         note="That branch failed: amount is still a float. How does the codebase round?"),
    Step("apply the fix", "apply_patch", '{"patch": "use Decimal and quantize(CENT)"}',
         "Applied patch to src/acme_pay/refunds.py (1 hunk).\n" + GOOD_PATCH),
    Step("run the tests", "run_tests", '{"path": "tests/test_refunds.py"}', PASSING_TESTS),
    Step("late question", user=LATE_QUESTION,
         note="Fixed: partial_refund now computes in Decimal and rounds with quantize(CENT, "
              "ROUND_HALF_UP), the way invoices.py does; all four tests pass."),
)
