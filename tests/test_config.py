"""Bad input is refused up front with an error that says what to change, and a
refused enqueue inserts nothing."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tether import JobState, Task, Tether
from tether.config import parse_database_url
from tether.errors import ArgumentsError, ConfigError, InvalidDSN, PayloadError, UnknownTask
from tether.payload import MAX_KEY_BYTES
from tether.store import open_store

AppFactory = Callable[..., Tether]


def handler(ctx: object, x: int, label: str = "") -> None:
    """A task body for registration; these tests never run it."""


def register(app: Tether, name: str = "tests.handler", **options: Any) -> Task[Any, Any]:
    task: Task[Any, Any] = app.task(name=name, **options)(handler)
    return task


def no_jobs(app: Tether) -> bool:
    return app.store.list_jobs(limit=10) == []


# -- database URLs ----------------------------------------------------------------------

BAD_URLS = {
    "unsupported scheme": "mysql://x",
    "sqlite with a host": "sqlite://host/x",
    "sqlite without a file": "sqlite:///",
    "port is not a number": "postgresql://h:notaport/db",
    "port out of range": "postgresql://h:99999/db",
    "schema twice": "postgresql://h/db?schema=a&schema=b",
    "sqlite option misspelt": "sqlite:///t.db?synchronus=full",
    "sqlite schema": "sqlite:///t.db?schema=x",
    "sqlite with one slash": "sqlite:/t.db",
    "empty": "",
    "blank": "   ",
    "no scheme": "tether.db",
}


@pytest.mark.parametrize("url", BAD_URLS.values(), ids=BAD_URLS.keys())
def test_malformed_database_urls_are_invalid_dsn(url: str) -> None:
    with pytest.raises(InvalidDSN) as info:
        parse_database_url(url)
    # the message shows a URL that would work
    assert "sqlite:///" in str(info.value) or "postgresql://" in str(info.value)
    with pytest.raises(InvalidDSN):
        Tether(url)
    with pytest.raises(InvalidDSN):
        open_store(url)


def test_sqlite_in_memory_is_refused_except_as_one_apps_private_database() -> None:
    """A worker process cannot share a :memory: database with its producers, so
    the URL is refused wherever it would name a shared one; ``Tether`` takes it
    as a private database for that one object (tether.testing, issue 21.3)."""
    with pytest.raises(InvalidDSN, match="sqlite:///"):
        parse_database_url("sqlite:///:memory:")
    with pytest.raises(InvalidDSN):
        open_store("sqlite:///:memory:")
    app = Tether("sqlite:///:memory:")
    try:
        assert app.dsn.backend == "sqlite" and app.scratch is not None and app.dsn.url.startswith(app.scratch)
    finally:
        app.close()


SECRET = "s3cretPW"
#: URLs with a password that are refused: the refusal must not quote it
SECRET_URLS = {
    "bad schema": f"postgresql://postgres:{SECRET}@127.0.0.1:5432/walk_c?schema=a-b",
    "bad port": f"postgresql://postgres:{SECRET}@127.0.0.1:xx/walk_c",
    "malformed IPv6 host": f"postgresql://postgres:{SECRET}@[::1:5432/x",
    "an @ in the password": f"postgresql://u:{SECRET}@x@127.0.0.1:xx/db",
    "a # in the password": f"postgresql://u:a#{SECRET}@127.0.0.1:xx/db",
    "schema twice": f"postgresql://u:{SECRET}@h/db?schema=a&schema=b",
    "unsupported scheme": f"mysql://u:{SECRET}@h/db",
    "sqlite with a host": f"sqlite://u:{SECRET}@host/x.db",
    "password option": f"postgresql://u@h/db?password={SECRET}&schema=a-b",
    "listen_url's password": f"mysql://u@h/db?listen_url=postgresql://l:{SECRET}@h2/db",
    "listen_url's, encoded": f"mysql://u@h/db?listen_url=postgresql%3A%2F%2Fl%3A{SECRET}%40h2%2Fdb",
    "server token option": f"http://h:8000?token={SECRET}",
    "server bad port": f"http://h:xx?token={SECRET}",
}


@pytest.mark.parametrize("url", SECRET_URLS.values(), ids=SECRET_URLS.keys())
def test_a_refused_url_is_quoted_without_its_password(url: str) -> None:
    with pytest.raises(InvalidDSN) as info:
        parse_database_url(url)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert "***" in str(info.value)  # the URL is quoted, masked


def test_a_driver_refusal_and_a_database_url_repr_do_not_show_the_password() -> None:
    # libpq quotes the part of the URL it cannot read: here the password alone
    with pytest.raises(InvalidDSN) as info:
        open_store(f"postgresql://u:{SECRET}%zz@127.0.0.1:1/db")
    assert "percent-encoded" in str(info.value) and SECRET not in str(info.value)
    dsn = parse_database_url(f"postgresql://u:{SECRET}@h/db?listen_url=postgresql://l:{SECRET}@h2/db")
    assert SECRET in dsn.url and SECRET in dsn.options["listen_url"]  # the driver's
    assert SECRET not in repr(dsn) and "u:***@h" in repr(dsn)


@pytest.mark.parametrize("spec", [f"nats://u:{SECRET}@h:4222?bogus=1", f"nats://u:{SECRET}@h:xx",
                                  f"nats://u:{SECRET}@:4222", f"nat://u:{SECRET}@h:4222"])
def test_a_refused_transport_url_is_quoted_without_its_password(spec: str) -> None:
    from tether.transport import open_transport

    with pytest.raises(ConfigError) as info:
        open_transport(spec)
    assert SECRET not in str(info.value) and "u:***@" in str(info.value)


BAD_SCHEMAS = ["bad-name", "1starts_with_digit", "semi;colon", '"quoted"', "a" * 64, "", "tether%0A"]


@pytest.mark.parametrize("schema", BAD_SCHEMAS)
def test_a_schema_that_is_not_an_identifier_is_refused_with_a_reason(schema: str) -> None:
    url = f"postgresql://u@h:5432/db?schema={schema}"
    with pytest.raises(ConfigError) as info:
        parse_database_url(url)
    assert "schema" in str(info.value) and "identifier" in str(info.value)
    with pytest.raises(ConfigError):
        Tether(url)


def test_a_schema_that_is_not_an_identifier_is_an_invalid_dsn() -> None:
    with pytest.raises(InvalidDSN):
        parse_database_url("postgresql://u@h:5432/db?schema=bad-name")


GOOD_URLS = {
    "sqlite:///relative.db": ("sqlite", "relative.db", "main"),
    "sqlite:////abs/path.db": ("sqlite", "/abs/path.db", "main"),
    "postgresql://u@h:5432/db": ("postgresql", "postgresql://u@h:5432/db", "tether"),
    "postgres://u@h/db?schema=jobs_1": ("postgresql", "postgresql://u@h/db", "jobs_1"),
}


@pytest.mark.parametrize("url", GOOD_URLS)
def test_well_formed_database_urls_parse(url: str) -> None:
    dsn = parse_database_url(url)
    assert (dsn.backend, dsn.url, dsn.schema) == GOOD_URLS[url]


def test_a_driver_option_that_needs_encoding_reaches_the_driver_whole() -> None:
    """The URL's query is decoded to find tether's own options, and the rest
    was written back for the driver raw: libpq refused
    ``options=-c%20statement_timeout%3D5000`` ("extra key/value separator"),
    and an ``&`` in a value split it in two."""
    import psycopg

    dsn = parse_database_url("postgresql://u@h/db?schema=jobs&options=-c%20statement_timeout%3D5000"
                             "&application_name=a%26b%20c&sslmode=require")
    given = psycopg.conninfo.conninfo_to_dict(dsn.url)
    assert (given["options"], given["application_name"], given["sslmode"]) == (
        "-c statement_timeout=5000", "a&b c", "require")
    assert dsn.schema == "jobs" and "schema" not in given


def test_the_pooler_options_are_tethers_and_never_reach_the_driver() -> None:
    dsn = parse_database_url(
        "postgresql://u:pw@pooler:6432/db?sslmode=require&pgbouncer=transaction&schema=jobs"
        "&listen_url=postgresql%3A%2F%2Fu%3Apw%40db%3A5432%2Fdb%3Fsslmode%3Drequire"
    )
    assert dsn.url == "postgresql://u:pw@pooler:6432/db?sslmode=require"
    assert dsn.schema == "jobs"
    assert dsn.options["pgbouncer"] == "transaction"
    assert dsn.options["listen_url"] == "postgresql://u:pw@db:5432/db?sslmode=require"
    # as the README writes it: a listen_url without a query of its own needs no encoding
    dsn = parse_database_url("postgresql://app@pooler:6432/mydb?pgbouncer=transaction"
                             "&listen_url=postgresql://app@db-host:5432/mydb")
    assert (dsn.url, dsn.options["listen_url"]) == ("postgresql://app@pooler:6432/mydb",
                                                    "postgresql://app@db-host:5432/mydb")


BAD_POOLER_URLS = {
    "session mode": ("pgbouncer=session", "pgbouncer='session'"),
    "empty mode": ("pgbouncer=", "pgbouncer=''"),
    "a boolean": ("pgbouncer=true", "pgbouncer='true'"),
    "startup options": ("pgbouncer=transaction&options=-c%20work_mem%3D64MB", "options="),
    "listen_url not postgresql": ("pgbouncer=transaction&listen_url=http://db:5432", "listen_url"),
    "listen_url with no host": ("pgbouncer=transaction&listen_url=postgresql:///db", "listen_url"),
    "listen_url through the pooler": (
        "pgbouncer=transaction&listen_url=" + "postgresql%3A%2F%2Fdb%2Fx%3Fpgbouncer%3Dtransaction", "listen_url"),
}


@pytest.mark.parametrize(("query", "named"), BAD_POOLER_URLS.values(), ids=BAD_POOLER_URLS.keys())
def test_bad_pooler_options_are_refused_naming_the_option(query: str, named: str) -> None:
    url = f"postgresql://u:secret@pooler:6432/db?{query}"
    with pytest.raises(ConfigError) as info:
        parse_database_url(url)
    assert isinstance(info.value, InvalidDSN)
    assert named in str(info.value)
    assert "secret" not in str(info.value)


# -- timers ---------------------------------------------------------------------------


def test_misordered_timers_say_what_to_change(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Tether(f"sqlite:///{tmp_path / 't.db'}", lease_ttl=10, heartbeat_interval=6)
    message = str(info.value)
    assert "heartbeat_interval" in message and "lease_ttl" in message
    assert "lower heartbeat_interval" in message and "raise lease_ttl" in message
    # the values it suggests are the rule's own bounds (half, twice), which it accepts
    assert "to at most 5s" in message and "to at least 12s" in message


@pytest.mark.parametrize(
    "timers",
    [
        {"lease_ttl": 10, "heartbeat_interval": 10},
        {"lease_ttl": 10, "heartbeat_interval": 30},
        {"lease_ttl": 0},
        {"heartbeat_interval": -1},
        {"reaper_interval": 0},
    ],
)
def test_bad_timers_are_refused(tmp_path: Path, timers: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        Tether(f"sqlite:///{tmp_path / 't.db'}", **timers)


def test_two_beats_per_lease_is_enough(tmp_path: Path) -> None:
    app = Tether(f"sqlite:///{tmp_path / 't.db'}", lease_ttl=10, heartbeat_interval=5)
    assert (app.timers.lease_ttl, app.timers.heartbeat_interval) == (10, 5)


def test_per_task_lease_ttl_shorter_than_two_heartbeats_is_refused(make_app: AppFactory) -> None:
    app = make_app(lease_ttl=30, heartbeat_interval=10)
    with pytest.raises(ConfigError) as info:
        register(app, lease_ttl=15)
    assert "two heartbeats" in str(info.value) and "20" in str(info.value)
    assert app.tasks == {}
    task = register(app, lease_ttl=20)
    with pytest.raises(ConfigError):
        task.using(lease_ttl=19)
    with pytest.raises(ConfigError):
        task.using(lease_ttl=0)
    assert task.using(lease_ttl=60).options.lease_ttl == 60


# -- payloads -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, b"bytes", float("nan"), datetime(2024, 1, 1, tzinfo=UTC),
     {1: "a", "1": "b"}, [{"deep": {None: 1}}], {"ok": {True: 1}}],
    ids=["object", "set", "bytes", "nan", "datetime", "int-key-colliding", "none-key-nested", "bool-key"],
)
def test_non_json_args_are_a_payload_error_and_insert_nothing(make_app: AppFactory, value: object) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(PayloadError) as info:
        task.enqueue(x=value)
    assert "JSON" in str(info.value)
    assert no_jobs(app)


def test_oversized_args_are_a_payload_error_and_insert_nothing(make_app: AppFactory) -> None:
    app = make_app(max_payload_bytes=1024)
    task = register(app)
    with pytest.raises(PayloadError) as info:
        task.enqueue(x=1, label="x" * 2000)
    assert "1024" in str(info.value)
    assert no_jobs(app)
    # one oversized job spoils the whole batch: all or nothing
    with pytest.raises(PayloadError):
        task.enqueue_many([{"x": 1}, {"x": 2, "label": "y" * 2000}, {"x": 3}])
    assert no_jobs(app)
    # just under the cap is fine
    job_id = task.enqueue(x=1, label="z" * 900)
    job = app.get_job(job_id)
    assert job is not None and job.args == {"x": 1, "label": "z" * 900}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"y": 1}, {"x": 1, "y": 2}, {"label": "only"}],
    ids=["missing", "unknown", "extra", "missing-required"],
)
def test_args_that_do_not_fit_the_handler_are_a_payload_error(make_app: AppFactory, kwargs: dict[str, Any]) -> None:
    """An ArgumentsError: a PayloadError (a ValueError), as every refused args
    are, and a TypeError, as calling the function with them would raise."""
    app = make_app()
    task = register(app)
    with pytest.raises(PayloadError) as info:
        task.enqueue(**kwargs)
    assert isinstance(info.value, ArgumentsError) and isinstance(info.value, TypeError)
    assert "tests.handler" in str(info.value)
    for name in set(kwargs) - {"x", "label"}:  # a stray name is named, not only the missing one
        assert repr(name) in str(info.value)
    assert no_jobs(app)


@pytest.mark.parametrize("many", [[("x", 1)], ["x"], [{"x": 1}, None], {"x": 1}, "x"],
                         ids=["tuple", "str", "none", "one-mapping", "a-str"])
def test_enqueue_many_of_what_is_not_args_mappings_is_a_payload_error(make_app: AppFactory, many: Any) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(PayloadError, match="enqueue_many"):
        task.enqueue_many(many)
    assert no_jobs(app)


def test_a_handler_that_forgot_its_ctx_is_refused_at_registration(make_app: AppFactory) -> None:
    """``def work(x: int)``: enqueue(x=1) would fail with bind's "multiple
    values for argument 'x'"; registration says what is wrong instead."""
    app = make_app()
    with pytest.raises(ConfigError, match=r"first parameter \(x: int\) takes the JobContext"):
        @app.task(name="work")
        def work(x: int) -> int:
            return x

    @app.task(name="fine")  # an unannotated or Any first parameter is the ctx
    def fine(ctx, x: int) -> int:  # type: ignore[no-untyped-def]
        return x


def test_unknown_task_name_is_refused(make_app: AppFactory) -> None:
    app = make_app()
    register(app)
    with pytest.raises(UnknownTask) as info:
        app.enqueue("nope")
    assert "nope" in str(info.value) and "tests.handler" in str(info.value)
    assert isinstance(info.value, LookupError)
    assert no_jobs(app)
    assert app.get_job(app.enqueue("tests.handler", x=1)) is not None


GOOD_TASK_NAMES = ["greet", "reports.nightly", "tests.test_config.test_x.<locals>.handler", "[red]rt[/red]",
                   "envoyer_courriel_é", "a b", "t" * 200]
BAD_TASK_NAMES = ["t" * 201, "a\x1bb", "\x1b]0;pwned\x07", "a\nb", "a\tb", "tail\n", "a\x00b", "a\x7fb", "a\x9bb",
                  "a\u202eb", "a\u2028b"]


def test_task_names_are_printable_and_bounded_alike_here_and_on_the_server(make_app: AppFactory) -> None:
    """A task name is shown wherever its jobs are (terminal, dashboard, logs):
    printable text of at most 200 characters, on every backend, so that an
    app moves unchanged between a database and a tether server."""
    from tether.naming import validate_task_name
    from tether.store.http.schema import SchemaViolation, validate
    from tether.store.http.wire import TASK

    app = make_app()
    for name in GOOD_TASK_NAMES:
        assert validate_task_name(name) == validate(name, TASK) == register(app, name).name
    for name in BAD_TASK_NAMES:
        with pytest.raises(ConfigError, match="task name"):
            register(app, name)
        with pytest.raises(ConfigError, match="task name"):
            app.periodic("0 3 * * *", name=name)(handler)
        with pytest.raises(SchemaViolation):
            validate(name, TASK)
    with pytest.raises(ConfigError):
        validate_task_name("")
    assert sorted(app.tasks) == sorted(GOOD_TASK_NAMES) and app.schedule_specs == {}
    assert register(app).name == "tests.handler" and app.task(handler).name == "tests.test_config.handler"


def test_a_tether_server_refuses_the_task_names_an_app_refuses(db_url: str) -> None:
    from tether.model import NewJob

    from .conftest import TEST_TOKEN, served

    with served(db_url) as url:
        remote = open_store(url, token=TEST_TOKEN)
        try:
            for name in ("a\x1bb", "t" * 201):
                with pytest.raises(PayloadError, match="task"):
                    remote.enqueue([NewJob(task=name, args_json="{}")])
            assert remote.list_jobs(limit=10) == []
            assert len(remote.enqueue([NewJob(task=n, args_json="{}") for n in GOOD_TASK_NAMES])) == 7
        finally:
            remote.close()


# -- task options ----------------------------------------------------------------------------

BAD_QUEUES = ["", "has space", "a/b", "semi;colon", "-leading-dash", "q" * 64, "ümlaut", "default\n"]


@pytest.mark.parametrize("queue", BAD_QUEUES)
def test_bad_queue_names_are_refused(make_app: AppFactory, queue: str) -> None:
    app = make_app()
    with pytest.raises(ConfigError) as info:
        register(app, name="bad", queue=queue)
    assert "queue" in str(info.value)
    task = register(app, queue="good.queue-1")
    with pytest.raises(ConfigError):
        task.using(queue=queue)
    assert no_jobs(app)


def test_naive_run_at_is_refused(make_app: AppFactory) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(ConfigError) as info:
        task.using(run_at=datetime.now())  # naive on purpose
    assert "timezone-aware" in str(info.value)
    assert no_jobs(app)


def test_delay_and_run_at_together_are_refused(make_app: AppFactory) -> None:
    app = make_app()
    task = register(app)
    when = datetime.now(UTC) + timedelta(minutes=5)
    with pytest.raises(ConfigError) as info:
        task.using(delay=10, run_at=when)
    assert "delay" in str(info.value) and "run_at" in str(info.value)
    assert no_jobs(app)
    # either alone is fine
    assert task.using(run_at=when).enqueue(x=1) > 0
    assert task.using(delay=10).enqueue(x=2) > 0


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 0}, {"max_attempts": True}, {"timeout": 0}, {"timeout": -5}, {"delay": -1}, {"priority": 1.5}, {"dedup_key": ""},
     {"dedup_key": "a\x00b"}, {"exclusive_key": "a\x00b"}, {"dedup_key": "a\ud800"}, {"exclusive_key": "\ud800"}],
    ids=["max_attempts", "max_attempts-bool", "timeout-zero", "timeout-negative", "delay", "priority", "dedup_key",
         "dedup_key-nul", "exclusive_key-nul", "dedup_key-surrogate", "exclusive_key-surrogate"],
)
def test_bad_task_options_are_refused(make_app: AppFactory, options: dict[str, Any]) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(ConfigError):
        task.using(**options)
    assert no_jobs(app)


def test_unknown_task_option_is_refused(make_app: AppFactory) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(ConfigError) as info:
        task.using(priorty=5)
    assert "priorty" in str(info.value)


@pytest.mark.parametrize("name", ["dedup_key", "exclusive_key"])
def test_a_key_is_held_to_what_postgresql_can_index(make_app: AppFactory, name: str) -> None:
    """A key of 2,000 bytes enqueues on every store; one byte more is refused
    with a hint to hash it. Before, PostgreSQL's index refused a key over about
    2,700 bytes (an exclusive_key of 1,000 four-byte characters included) with
    the driver's error, where SQLite took it."""
    app = make_app()
    task = register(app)
    rng = random.Random(7)  # incompressible, so PostgreSQL cannot squeeze the index row under its limit
    widest = "".join(chr(0x10000 + rng.randrange(60000)) for _ in range(500))
    assert len(widest.encode()) == MAX_KEY_BYTES
    assert task.using(**{name: widest}).enqueue(x=1) > 0
    for over in (widest + "a", "a" * (MAX_KEY_BYTES + 1)):
        with pytest.raises(ConfigError) as info:
            task.using(**{name: over})
        assert f"{name} is {MAX_KEY_BYTES + 1} bytes" in str(info.value) and "hash" in str(info.value)
    assert len(app.store.list_jobs(limit=10)) == 1


@pytest.mark.parametrize("bad", [True, "1", 1.0, None], ids=["bool", "str", "float", "none"])
def test_a_job_id_that_is_not_an_int_is_refused(make_app: AppFactory, bad: Any) -> None:
    """app.wait(True) and app.wait("1") returned job 1 on SQLite (its columns
    take any type) and failed with the driver's error on PostgreSQL."""
    app = make_app()
    task = register(app)
    job_id = task.enqueue(x=1)
    assert job_id == 1
    for call in (app.get_job, app.cancel, app.retry, lambda j: app.wait(j, timeout=0.1)):
        with pytest.raises(ConfigError, match="a job id is an int"):
            call(bad)
    job = app.get_job(job_id)
    assert job is not None and job.state is JobState.QUEUED


@pytest.mark.parametrize("huge", [2**63, -(2**63) - 1, 10**20])
def test_a_job_id_past_64_bits_is_refused_alike_on_every_backend(make_app: AppFactory, huge: int) -> None:
    """``tether job 99999999999999999999``: SQLite's driver raised
    OverflowError, PostgreSQL found no job (a new user's walkthrough)."""
    app = make_app()
    for call in (app.get_job, app.cancel, app.retry):
        with pytest.raises(ConfigError, match="out of range: a job id is a 64-bit int"):
            call(huge)
    assert app.get_job(2**63 - 1) is None  # the largest is a job id, one that does not exist


def test_one_dedup_key_for_many_jobs_is_refused(make_app: AppFactory) -> None:
    app = make_app()
    task = register(app)
    with pytest.raises(ConfigError):
        task.using(dedup_key="k").enqueue_many([{"x": 1}, {"x": 2}])
    assert no_jobs(app)


def _h_plain(ctx: object, x: int, label: str = "") -> None: ...
def _h_kwonly(ctx: object, *, x: int, y: int = 0) -> None: ...
def _h_varkw(ctx: object, x: int, **rest: Any) -> None: ...
def _h_varargs(ctx: object, *more: Any, x: int = 0) -> None: ...
def _h_posonly(ctx: object, x: int, /, y: int = 0) -> None: ...
def _h_posonly_default(ctx: object, x: int = 1, /, y: int = 0) -> None: ...


@pytest.mark.parametrize("fn", [_h_plain, _h_kwonly, _h_varkw, _h_varargs, _h_posonly, _h_posonly_default])
def test_check_args_agrees_with_signature_bind(fn: Any) -> None:
    """check_args skips Signature.bind when it can tell the args fit; it must
    accept and refuse exactly what bind does."""
    import inspect
    import itertools

    task = Tether("sqlite:///unused.db").task(fn)
    names = ["x", "y", "label", "ctx", "other"]
    for n in range(len(names) + 1):
        for keys in itertools.combinations(names, n):
            kwargs = dict.fromkeys(keys, 1)
            try:
                inspect.signature(fn).bind(None, **kwargs)
                fits = True
            except TypeError:
                fits = False
            if fits:
                task.check_args(kwargs)
            else:
                with pytest.raises(PayloadError):
                    task.check_args(kwargs)


def test_a_database_that_does_not_answer_is_a_connection_error_and_a_wrong_url_is_not() -> None:
    """Code that retries an outage catches ConnectionError; a URL naming a
    database that does not exist must be fixed, not retried. Both stay
    InvalidDSN, as every failure to connect was before."""
    from tether.errors import DatabaseUnavailable
    from tether.store import open_store

    with pytest.raises(DatabaseUnavailable) as down:
        open_store("postgresql://postgres@127.0.0.1:1/test").stats()
    assert isinstance(down.value, ConnectionError) and isinstance(down.value, InvalidDSN)
    assert "127.0.0.1:1" in str(down.value)
    from .conftest import PG_URL

    with pytest.raises(InvalidDSN) as wrong:
        open_store(PG_URL.rsplit("/", 1)[0] + "/no_such_database_here").stats()
    assert not isinstance(wrong.value, ConnectionError)
    assert "no_such_database_here" in str(wrong.value)
    # A bad value of a libpq option is the URL's to fix too. It was taken for
    # an outage, after the pool's 10 s (the probe's own connect_timeout hid it).
    with pytest.raises(InvalidDSN) as bad:
        open_store(PG_URL + ("&" if "?" in PG_URL else "?") + "connect_timeout=abc").stats()
    assert not isinstance(bad.value, ConnectionError)
    assert "bad value for connect_timeout" in str(bad.value)


def test_a_nats_url_without_the_nats_extra_names_the_extra() -> None:
    """Without nats-py (here: made unimportable in a fresh interpreter) a NATS
    transport is a ConfigError naming ``pip install 'tether[nats]'``, not a bare
    ModuleNotFoundError."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['nats'] = None\n"
            "from tether.transport import open_transport\n"
            "from tether.errors import ConfigError\n"
            "try:\n"
            "    open_transport('nats://127.0.0.1:4222')\n"
            "except ConfigError as exc:\n"
            "    print('ConfigError:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ConfigError: the NATS transport needs its extra: pip install 'tether[nats]'" in out.stdout


def test_priority_takes_every_32_bit_int(make_app: AppFactory) -> None:
    """The README's "any 32-bit int": -2147483648 was refused by the Python
    API though the server and the column take it (a new user's walkthrough)."""
    app = make_app()
    task = register(app)
    for priority in (-(2**31), 2**31 - 1):
        job = app.get_job(task.using(priority=priority).enqueue(x=1))
        assert job is not None and job.priority == priority
    for priority in (-(2**31) - 1, 2**31):
        with pytest.raises(ConfigError, match="priority must be an int from -2147483648 to 2147483647"):
            task.using(priority=priority).enqueue(x=1)


def test_job_options_keep_their_names_before_issue_48() -> None:
    from tether.app import TaskOptions as FromApp
    from tether.task import JobDefaults, JobOptions, TaskKeywords, TaskOptions

    assert TaskOptions is JobOptions and FromApp is JobOptions and TaskKeywords is JobDefaults
