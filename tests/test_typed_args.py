"""Typed job args and results (issue 45), on every store: a handler parameter
annotated with a dataclass, ``datetime``, ``date``, ``UUID``, ``Decimal``, an
``Enum`` or a Pydantic model is checked and turned into JSON at enqueue, stored
as JSON (a ``tether server`` never imports the models), rebuilt in the worker,
and an annotated result is read back typed through ``app.wait``, ``get_job``
and ``app.drain``. Jobs run through ``app.drain()``: a real burst worker."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import subprocess
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pydantic
import pytest

from tether import JobContext, Tether, convert
from tether.errors import ArgumentsError, PayloadError
from tether.model import JobState, Outcome
from tether.testing import MEMORY_URL, assert_enqueued, context

from .conftest import STORE_BACKENDS, TEST_TOKEN, backend_param, served


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def new_app(backend: str, db_url: str) -> Iterator[Callable[[], Tether]]:
    """A factory of apps over this test's store (for ``http-*``, one server
    over the database: the server stores JSON and never imports the models)."""
    apps: list[Tether] = []
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(served(db_url)) if backend.startswith("http-") else db_url

        def make() -> Tether:
            a = Tether(url, token=TEST_TOKEN) if backend.startswith("http-") else Tether(url)
            if not backend.startswith("http-"):
                a.migrate()
            apps.append(a)
            return a

        yield make
        for a in apps:
            a.close()


@pytest.fixture
def app(new_app: Callable[[], Tether]) -> Tether:
    return new_app()


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: uuid.UUID
    price: Decimal
    size: Size = Size.SMALL


@dataclasses.dataclass(frozen=True)
class Order:
    id: int
    placed: datetime
    lines: list[Line]
    note: str | None = None


@dataclasses.dataclass(frozen=True)
class Receipt:
    order: int
    total: Decimal
    days: dict[str, date]


@dataclasses.dataclass
class Pair:
    pair: tuple  # type: ignore[type-arg]  # bare: a tuple comes back as one
    tags: set  # type: ignore[type-arg]


class Customer(pydantic.BaseModel):
    name: str
    since: date
    tags: list[str] = []


seen: list[object] = []

ORDER = Order(id=7, placed=datetime(2026, 11, 28, 12, 30, tzinfo=UTC),
              lines=[Line(uuid.UUID(int=1), Decimal("9.99")), Line(uuid.UUID(int=2), Decimal("0.01"), Size.LARGE)])


def register(app: Tether) -> None:
    @app.task(name="checkout")
    def checkout(ctx: JobContext, order: Order, customer: Customer, ids: list[uuid.UUID],
                 due: dict[str, date], when: datetime | None = None) -> Receipt:
        seen[:] = [order, customer, ids, due, when]
        return Receipt(order.id, sum((line.price for line in order.lines), Decimal(0)), due)

    @app.task(name="greet")
    async def greet(ctx: JobContext, customer: Customer, size: Size) -> Customer:
        return customer.model_copy(update={"tags": [*customer.tags, size.value]})

    @app.task(name="plain")
    def plain(ctx: JobContext, n: int, tags: list[str]) -> dict[str, int]:
        return {"n": n, "tags": len(tags)}


def test_typed_args_are_stored_as_json_rebuilt_in_the_worker_and_the_result_read_back_typed(app: Tether) -> None:
    register(app)
    customer = Customer(name="Ada", since=date(2020, 1, 2), tags=["vip"])
    due = {"first": date(2026, 12, 1)}
    job_id = app.tasks["checkout"].enqueue(order=ORDER, customer=customer, ids=[uuid.UUID(int=3)], due=due)
    assert assert_enqueued(app.tasks["checkout"], order=ORDER).id == job_id  # matched as stored
    stored = app.store.get_job(job_id)  # the store's own view: JSON
    assert stored is not None
    assert stored.args["order"]["lines"][1] == {"sku": str(uuid.UUID(int=2)), "price": "0.01", "size": "l"}
    assert stored.args["customer"] == {"name": "Ada", "since": "2020-01-02", "tags": ["vip"]}
    assert stored.args["due"] == {"first": "2026-12-01"}

    drained = app.drain()
    assert [d.outcome for d in drained] == [Outcome.SUCCEEDED], drained
    assert seen == [ORDER, customer, [uuid.UUID(int=3)], due, None]
    receipt = Receipt(7, Decimal("10.00"), due)
    assert drained[0].result == receipt
    assert app.wait(job_id, timeout=10).result == receipt
    job = app.get_job(job_id)
    assert job is not None and job.result == receipt
    raw = app.store.get_job(job_id)
    assert raw is not None and raw.result == {"order": 7, "total": "10.00", "days": {"first": "2026-12-01"}}


def test_an_async_handler_with_a_pydantic_model_and_an_enum(app: Tether) -> None:
    register(app)
    job_id = app.tasks["greet"].enqueue(customer=Customer(name="Bo", since=date(2021, 5, 6)), size=Size.LARGE)
    [done] = app.drain()
    assert done.succeeded, done.error
    assert done.result == Customer(name="Bo", since=date(2021, 5, 6), tags=["l"])
    assert app.wait(job_id, timeout=10).result == done.result


def test_plain_json_handlers_are_unchanged(app: Tether) -> None:
    register(app)
    task = app.tasks["plain"]
    assert task.run is task.fn  # no wrapper, no conversion
    job_id = task.enqueue(n=3, tags=["a", "b"])
    [done] = app.drain()
    assert done.result == {"n": 3, "tags": 2}
    assert app.wait(job_id, timeout=10).result == {"n": 3, "tags": 2}


@pytest.mark.parametrize(("args", "field"), [
    ({"order": {"id": 7}}, "order: expected Order, got dict"),
    ({"order": dataclasses.replace(ORDER, lines=[Line("not-a-uuid", Decimal(1))])},  # type: ignore[arg-type]
     "order.lines[0].sku: expected UUID, got str 'not-a-uuid'"),
    ({"order": dataclasses.replace(ORDER, id="7")}, "order.id: expected int, got str '7'"),  # type: ignore[arg-type]
    ({"ids": ["x"]}, "ids[0]: expected UUID"),
    ({"due": {"a": datetime(2026, 1, 1)}}, "due['a']: expected date, got datetime"),
    ({"when": "2026-01-01"}, "when: expected datetime, got str"),
])
def test_a_wrong_type_is_refused_at_enqueue_with_the_field_named(app: Tether, args: dict[str, object],
                                                                   field: str) -> None:
    register(app)
    good = {"order": ORDER, "customer": Customer(name="A", since=date(2020, 1, 1)), "ids": [], "due": {}}
    with pytest.raises(ArgumentsError, match=r"task 'checkout'") as info:
        app.tasks["checkout"].enqueue(**{**good, **args})
    assert field in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, PayloadError)
    assert app.store.list_jobs(state=JobState.QUEUED.value, limit=10) == []  # nothing enqueued
    with pytest.raises(ArgumentsError):  # enqueue_many refuses the lot
        app.tasks["checkout"].enqueue_many([good, {**good, **args}])
    assert app.store.list_jobs(state=JobState.QUEUED.value, limit=10) == []


@dataclasses.dataclass
class Changed:
    id: int
    placed: datetime
    lines: list[Line]
    region: str  # a required field added after the job was enqueued
    note: str | None = None


def test_stored_args_that_a_changed_class_no_longer_takes_fail_with_the_field_named(
        app: Tether, new_app: Callable[[], Tether]) -> None:
    register(app)
    job_id = app.tasks["checkout"].using(max_attempts=1).enqueue(
        order=ORDER, customer=Customer(name="A", since=date(2020, 1, 1)), ids=[], due={})
    # a deploy: the same task, its arg now of a class with a new required field
    redeployed = new_app()

    @redeployed.task(name="checkout")
    def checkout(ctx: JobContext, order: Changed, customer: Customer, ids: list[uuid.UUID],
                 due: dict[str, date]) -> None:
        raise AssertionError("never called with args that do not fit")

    [done] = redeployed.drain()
    assert done.state is JobState.DEAD
    assert done.error is not None and done.error.startswith("ArgsMisfit: ")
    assert "order.region" in done.error and "missing" in done.error
    assert app.get_job(job_id) is not None


# -- the conversion itself (no store) ------------------------------------------------------


@pytest.mark.parametrize(("tp", "value", "data"), [
    (uuid.UUID | None, None, None),
    (uuid.UUID | None, uuid.UUID(int=5), str(uuid.UUID(int=5))),
    (tuple[date, Size], (date(2026, 1, 2), Size.LARGE), ["2026-01-02", "l"]),
    (tuple[Decimal, ...], (Decimal("1.5"), Decimal("-0")), ["1.5", "-0"]),
    (set[uuid.UUID], {uuid.UUID(int=1)}, [str(uuid.UUID(int=1))]),
    (dict[uuid.UUID, list[Size]], {uuid.UUID(int=1): [Size.SMALL]}, {str(uuid.UUID(int=1)): ["s"]}),
    (list[Pair], [Pair((1, "a"), {2})], [{"pair": [1, "a"], "tags": [2]}]),
    (list[Line | None], [None, Line(uuid.UUID(int=9), Decimal("2"))],
     [None, {"sku": str(uuid.UUID(int=9)), "price": "2", "size": "s"}]),
])
def test_containers_unions_and_tuples_round_trip(tp: object, value: object, data: object) -> None:
    assert convert.is_typed(tp)
    assert convert.dump(value, tp, "x") == data
    assert convert.load(data, tp, "x") == value


def test_plain_annotations_are_not_typed() -> None:
    for tp in (int, str, dict[str, int], list[str] | None, object):
        assert not convert.is_typed(tp)


@pytest.mark.parametrize(("tp", "data", "said"), [
    (Size, "m", "x: not a Size: 'm' is not a valid Size"),
    (date, "2026-13-01", "x: not a date"),
    (Decimal, "ten", "x: not a Decimal"),
    (list[uuid.UUID], ["1", 2], "x[0]: not a UUID"),
    (Customer, {"name": "A", "since": "yesterday"}, "x.since: not a Customer"),
    (Line, {"sku": str(uuid.UUID(int=1)), "price": "1", "colour": "red"}, "x.colour: Line has no field 'colour'"),
])
def test_stored_data_that_does_not_fit_names_the_field(tp: object, data: object, said: str) -> None:
    with pytest.raises(convert.Misfit) as info:
        convert.load(data, tp, "x")
    assert str(info.value).startswith(said), str(info.value)


def test_import_tether_does_not_import_pydantic() -> None:
    code = "import sys, tether, tether.testing; assert 'pydantic' not in sys.modules, 'pydantic imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_calling_the_handler_directly_takes_and_returns_the_typed_values() -> None:
    app = Tether(MEMORY_URL)
    register(app)
    customer = Customer(name="A", since=date(2020, 1, 1))
    assert app.tasks["checkout"](context(), order=ORDER, customer=customer, ids=[], due={}) == \
        Receipt(7, Decimal("10.00"), {})
    app.close()


TYPED_EXAMPLE = """\
import dataclasses
import uuid
from datetime import date

from tether import JobContext, Tether, convert

app = Tether("sqlite:///:memory:")


@dataclasses.dataclass
class Doc:
    id: uuid.UUID
    day: date


@app.task
def render(ctx: JobContext, doc: Doc, ids: list[uuid.UUID]) -> Doc:
    return doc


render.enqueue(doc=Doc(uuid.uuid4(), date.today()), ids=[uuid.uuid4()])
render.enqueue(doc={"id": "x"}, ids=[])  # error: a dict is not a Doc
render.enqueue(doc=Doc(uuid.uuid4(), date.today()), ids=["x"])  # error: a str is not a UUID
"""


def test_mypy_still_catches_a_wrong_typed_argument_at_the_call_site(tmp_path: Path) -> None:
    example = tmp_path / "typed_args_example.py"
    example.write_text(TYPED_EXAMPLE)
    env = {**os.environ, "MYPYPATH": str(Path(__file__).resolve().parent.parent / "src")}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "--hide-error-context", str(example)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = sorted({int(line.split(":")[1]) for line in proc.stdout.splitlines() if ": error:" in line})
    bad = [n for n, line in enumerate(TYPED_EXAMPLE.splitlines(), 1) if "# error:" in line]
    assert len(bad) == 2 and lines == bad, proc.stdout + proc.stderr


def test_the_docs_typed_arguments_example_runs() -> None:
    """The example docs/how-to/typed-arguments.md shows (its section of docs/examples/guides/typed.py)."""
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "guides" / "typed.py"
    text = example.read_text()
    block = text[text.index("# --8<-- [start:example]\n"):text.index("# --8<-- [end:example]")]
    module = sys.modules["readme_typed"] = types.ModuleType("readme_typed")  # where dataclasses resolve names
    try:
        exec(compile(block, str(example), "exec", dont_inherit=True), module.__dict__)
        app = module.__dict__["app"]
        assert isinstance(app, Tether)
        app.close()
    finally:
        del sys.modules["readme_typed"]


class Colour(enum.Enum):  # what Size became in a later deploy: "l" is gone
    SMALL = "s"
    MEDIUM = "m"


def test_an_async_handlers_stored_enum_that_no_longer_fits_fails_with_the_field_named(
        app: Tether, new_app: Callable[[], Tether]) -> None:
    register(app)
    app.tasks["greet"].using(max_attempts=1).enqueue(customer=Customer(name="C", since=date(2020, 1, 1)),
                                                     size=Size.LARGE)
    redeployed = new_app()

    @redeployed.task(name="greet")
    async def greet(ctx: JobContext, customer: Customer, size: Colour) -> None:
        raise AssertionError("never called with args that do not fit")

    [done] = redeployed.drain()
    assert done.state is JobState.DEAD and done.error is not None
    assert done.error.startswith("ArgsMisfit: stored args do not fit task 'greet': size: not a Colour"), done.error


def test_a_result_that_does_not_fit_its_annotation_fails_the_attempt_and_a_changed_one_fails_the_read() -> None:
    with contextlib.closing(Tether(MEMORY_URL)) as app:
        @app.task(max_attempts=1)
        def wrong(ctx: JobContext) -> Receipt:
            return {"order": 1}  # type: ignore[return-value]

        @app.task
        def right(ctx: JobContext) -> Receipt:
            return Receipt(1, Decimal("2"), {"a": date(2026, 1, 1)})

        wrong_id, right_id = wrong.enqueue(), right.enqueue()
        by_id = {d.job_id: d for d in app.drain()}
        assert by_id[wrong_id].state is JobState.DEAD
        assert "the result of task" in (by_id[wrong_id].error or "")
        assert "result: expected Receipt, got dict" in (by_id[wrong_id].error or "")
        assert by_id[right_id].result == Receipt(1, Decimal("2"), {"a": date(2026, 1, 1)})
        right._returns = dict[str, uuid.UUID]  # what a deploy changed the return type to
        with pytest.raises(PayloadError, match=r"stored result of task .*result\['order'\]: expected a UUID string"):
            app.get_job(right_id)


CLI_APP = """
import uuid
from datetime import date

from tether import JobContext, Tether

app = Tether({url!r})


@app.task(name="visit")
def visit(ctx: JobContext, who: uuid.UUID, day: date, note: str = "") -> str:
    return f"{{type(who).__name__}} {{type(day).__name__}}"
"""


def test_tether_enqueue_takes_typed_args_as_their_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    module = f"typed_cli_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(CLI_APP.format(url=url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delenv("TETHER_DATABASE_URL", raising=False)
    runner = CliRunner()
    assert runner.invoke(cli, ["-d", url, "migrate"], catch_exceptions=False).exit_code == 0
    args = f'{{"who": "{uuid.UUID(int=4)}", "day": "2026-02-03"}}'
    ok = runner.invoke(cli, ["enqueue", "visit", "--app", f"{module}:app", "--args", args], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(cli, ["enqueue", "visit", "--app", f"{module}:app", "--args",
                              '{"who": "nobody", "day": "2026-02-03"}'], catch_exceptions=False)
    assert bad.exit_code == 2 and "who: not a UUID" in bad.output, bad.output
    app = sys.modules[module].app
    try:
        [done] = app.drain()
        assert done.result == "UUID date"
    finally:
        app.close()
        del sys.modules[module]


@dataclasses.dataclass
class Node:
    children: list[Node]


def test_a_cycle_in_a_typed_arg_is_refused_at_enqueue() -> None:
    with contextlib.closing(Tether(MEMORY_URL)) as app:
        @app.task
        def walk(ctx: JobContext, root: Node) -> None: ...

        root = Node([])
        root.children.append(root)
        with pytest.raises(ArgumentsError, match="nest too deep"):
            walk.enqueue(root=root)
        walk.enqueue(root=Node([Node([])]))
        [done] = app.drain()
        assert done.succeeded, done.error


def test_an_annotation_that_cannot_be_resolved_leaves_its_arg_plain_json() -> None:
    def handler(ctx: JobContext, when: date, x: int) -> None: ...

    handler.__annotations__["x"] = "OnlyUnderTypeChecking"  # a name imported under TYPE_CHECKING
    with contextlib.closing(Tether(MEMORY_URL)) as app:
        task = app.task(name="h")(handler)
        assert set(task._typed) == {"when"}  # the rest still typed
        task.enqueue(when=date(2026, 1, 1), x={"any": "json"})  # type: ignore[arg-type]
        [done] = app.drain()
        assert done.succeeded, done.error
