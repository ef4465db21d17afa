"""The how-to "Typed arguments": run by tests/test_typed_args.py (in a module of
its own, where the dataclasses resolve their names) and tests/test_docs_guides.py."""

# --8<-- [start:example]
import dataclasses
import uuid
from datetime import date, datetime
from decimal import Decimal

from tether import JobContext, Tether

app = Tether("sqlite:///:memory:")


@dataclasses.dataclass
class Line:
    sku: uuid.UUID
    price: Decimal


@dataclasses.dataclass
class Invoice:
    total: Decimal
    due: date


@app.task
def bill(ctx: JobContext, customer: uuid.UUID, lines: list[Line], placed: datetime | None = None) -> Invoice:
    return Invoice(sum((line.price for line in lines), Decimal(0)), date(2026, 12, 31))


job_id = bill.enqueue(customer=uuid.uuid4(), lines=[Line(uuid.uuid4(), Decimal("9.99"))])
app.drain()                                   # the worker rebuilt a UUID, Lines and their Decimals
invoice = app.wait(job_id, timeout=30).result  # an Invoice again, not a dict
assert invoice == Invoice(Decimal("9.99"), date(2026, 12, 31))
# --8<-- [end:example]
app.close()
