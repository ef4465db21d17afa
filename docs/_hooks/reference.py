"""The site's generated Reference pages, made from the code at every build
(mkdocs.yml names this file under ``hooks:``), so none of them can drift:

- reference/python.md: a mkdocstrings block per name in ``tether.__all__``;
- reference/cli.md: every click command, walked as ``tether --help`` walks them
  (the lazily imported ones too), with its options' types, bounds, defaults
  and environment variables;
- reference/http.md and reference/openapi.json: the OpenAPI document a tether
  server serves, asked of the real server app (over a scratch SQLite file);
- reference/settings.md: ``Tether(...)``'s settings, the timers' bounds and
  the defaults in ``tether.config``, with their comments;
- reference/events.md and reference/metrics.md: ``tether.events.EVENT_NAMES``
  and the metrics ``tether.metrics`` registers (read from its source, so the
  page needs no prometheus_client).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import click

#: click 8.3's "no default given" (older clicks say None)
_UNSET = getattr(click.core, "UNSET", None)
SRC = Path(__file__).resolve().parents[2] / "src" / "tether"


def _cell(text: object) -> str:
    """Text for a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    text = str(text)
    return f"``{text}``" if "`" in text else f"`{text}`"


def _first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n")[0]


# -- Python API ---------------------------------------------------------------------------------------------------

def python_page() -> str:
    import tether

    names = sorted(n for n in tether.__all__ if not n.startswith("_"))
    out = ["# Python API", "",
           "Every public name of the `tether` package (`tether.__all__`), from its docstrings and type annotations. "
           f"`tether.__version__` is `{tether.__version__}` for this build.", ""]
    for name in names:
        out += [f"::: tether.{name}", "    options:", "      heading_level: 2", "      show_root_full_path: false", ""]
    return "\n".join(out)


# -- CLI ----------------------------------------------------------------------------------------------------------

def _type_text(param: click.Parameter) -> str:
    kind = param.type
    if isinstance(kind, click.Choice):
        return " \\| ".join(_code(c) for c in kind.choices)
    if isinstance(kind, click.types._NumberRangeBase):
        text = f"{kind.name} {kind._describe_range()}"
    elif param.is_flag if isinstance(param, click.Option) else False:
        return "flag"
    else:
        text = getattr(param, "metavar", None) or kind.name
    return _cell(text)


def _default_text(param: click.Parameter, ctx: click.Context) -> str:
    default = param.get_default(ctx, call=False)
    flag = isinstance(param, click.Option) and param.is_flag
    if default is None or default is _UNSET or callable(default) or default == () or (flag and default is False):
        return ""
    if isinstance(param, click.Option) and param.secondary_opts and isinstance(default, bool):
        return _code(param.opts[0] if default else param.secondary_opts[0])
    return _code(default)


def _command_section(cmd: click.Command, ctx: click.Context, path: list[str], out: list[str]) -> None:
    name = " ".join(path)
    out += [f"## `{name}`" if len(path) > 1 else f"# `{name}`", ""]
    if cmd.help:
        out += [inspect.cleandoc(cmd.help).replace("\b\n", ""), ""]
    pieces = cmd.collect_usage_pieces(ctx)
    out += ["```text", f"Usage: {name} {' '.join(pieces)}".rstrip(), "```", ""]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    args = [p for p in params if isinstance(p, click.Argument)]
    opts = [p for p in params if isinstance(p, click.Option) and "--help" not in p.opts]
    if args:
        out += ["| argument | type |", "|---|---|"]
        out += [f"| {_code(p.human_readable_name)} | {_type_text(p)} |" for p in args]
        out.append("")
    if opts:
        out += ["| option | type | default | environment | meaning |", "|---|---|---|---|---|"]
        for p in opts:
            names = ", ".join(_code(o) for o in [*p.opts, *p.secondary_opts])
            env = p.envvar if isinstance(p.envvar, str) else ", ".join(p.envvar or ())
            out.append(f"| {names} | {_type_text(p)} | {_default_text(p, ctx)} | {_code(env) if env else ''} "
                       f"| {_cell(p.help or '')} |")
        out.append("")


def cli_page() -> str:
    from tether.cli.main import cli

    out: list[str] = []
    root = click.Context(cli, info_name="tether")
    _command_section(cli, root, ["tether"], out)
    out += ["The commands, each with its options (`tether COMMAND --help` prints the same).", ""]
    assert isinstance(cli, click.Group)
    for sub in cli.list_commands(root):
        cmd = cli.get_command(root, sub)
        assert cmd is not None, sub
        ctx = click.Context(cmd, info_name=sub, parent=root)
        _command_section(cmd, ctx, ["tether", sub], out)
        if isinstance(cmd, click.Group):
            for leaf in cmd.list_commands(ctx):
                inner = cmd.get_command(ctx, leaf)
                assert inner is not None, leaf
                _command_section(inner, click.Context(inner, info_name=leaf, parent=ctx), ["tether", sub, leaf], out)
    return "\n".join(out)


# -- HTTP API -----------------------------------------------------------------------------------------------------

def openapi_document() -> dict[str, Any]:
    """``GET /openapi.json`` of a real tether server app (defaults, over a
    scratch SQLite file), called as ASGI: no socket, no lifespan."""
    from tether.server.app import create_app
    from tether.server.auth import parse_tokens
    from tether.store import open_store

    token = "docs-build-token-0123456789abcdef"
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/docs.db")
        try:
            app = create_app(store, parse_tokens(f"{token} admin", "docs"))
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                     "scheme": "http", "path": "/openapi.json", "raw_path": b"/openapi.json", "root_path": "",
                     "query_string": b"", "headers": [(b"authorization", f"Bearer {token}".encode())],
                     "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
            asyncio.run(app(scope, receive, send))
        finally:
            store.close()
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    if status != 200:
        raise RuntimeError(f"the server answered /openapi.json with {status}: {body[:200]!r}")
    document: dict[str, Any] = json.loads(body)
    return document


def http_page(document: dict[str, Any]) -> str:
    info = document["info"]
    out = ["# HTTP API", "",
           f"What a `tether server` serves (OpenAPI {document['openapi']}, server version {info['version']}); "
           "the machine-readable document is [openapi.json](openapi.json), as the server's own "
           "`GET /openapi.json` returns it (with a bearer token of any scope).", "",
           info["description"], "",
           "Every request carries `Authorization: Bearer TOKEN`; an error is a JSON object in this shape, "
           "with the HTTP status each operation lists:", ""]
    errors = [r for methods in document["paths"].values() for op in methods.values()
              for st, r in op["responses"].items() if st != "200"]
    out += ["```json", json.dumps(errors[0]["content"]["application/json"]["schema"], indent=2), "```", ""]
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", "", f"{op['summary']}.", "",
                    f"Operation `{op['operationId']}`. {op.get('description', '')}", ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | schema |", "|---|---|---|---|"]
                out += [f"| `{p['name']}` | {p['in']} | {'yes' if p['required'] else 'no'} "
                        f"| {_code(json.dumps(p['schema']))} |" for p in params]
                out.append("")
            body = op.get("requestBody")
            if body:
                schema = body["content"]["application/json"]["schema"]
                out += ["Request body" + (" (required)" if body.get("required") else "") + ":", "",
                        "```json", json.dumps(schema, indent=2), "```", ""]
            ok = op["responses"]["200"]["content"]["application/json"]["schema"]
            out += ["Response (200):", "", "```json", json.dumps(ok, indent=2), "```", "",
                    "| status | when |", "|---|---|"]
            out += [f"| {st} | {_cell(r['description'])} |" for st, r in op["responses"].items() if st != "200"]
            out.append("")
    return "\n".join(out)


# -- settings -----------------------------------------------------------------------------------------------------

def _comment(lines: list[str], node: ast.stmt, *, plain_above: bool) -> str:
    """A definition's comment: its ``#:`` lines above (or, with
    ``plain_above``, a plain ``#`` block right above), else a ``#`` after it."""
    above: list[str] = []
    n = node.lineno - 2
    while n >= 0 and lines[n].lstrip().startswith("#:"):
        above.insert(0, lines[n].lstrip()[2:].strip())
        n -= 1
    if not above and plain_above:
        while n >= 0 and lines[n].startswith("#") and not lines[n].startswith("# --"):
            above.insert(0, lines[n][1:].strip())
            n -= 1
    line = lines[node.lineno - 1]
    code, _, after = line.partition("#")
    return " ".join(above) or (after.strip() if "=" in code else "")


def _module_constants(path: Path) -> list[tuple[str, str]]:
    """(NAME, comment) for each upper-case module-level assignment."""
    source = path.read_text()
    lines = source.splitlines()
    found: list[tuple[str, str]] = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name.isupper() and not name.startswith("_"):
            found.append((name, _comment(lines, node, plain_above=True)))
    return found


def _class_fields(path: Path, cls: str) -> dict[str, str]:
    """A dataclass's fields in ``path``, each with its comment."""
    source = path.read_text()
    lines = source.splitlines()
    (node,) = (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {f.target.id: _comment(lines, f, plain_above=False) for f in node.body
            if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}


#: what ``JobOptions.checked`` (tether/task.py) accepts, field by field
#: (tests/test_docs_examples.py fails on a field missing here)
TASK_BOUNDS = {
    "queue": "letters, digits, `_`, `-` and `.`, at most 63 characters",
    "priority": "an int from -2147483648 to 2147483647",
    "max_attempts": "an int >= 1",
    "lease_ttl": "seconds, at least two of the app's `heartbeat_interval`",
    "timeout": "seconds, positive",
    "retry_backoff": "seconds >= 0, or a callable `(attempt) -> seconds` (at `@app.task` only)",
    "delay": "seconds from 0 to `MAX_DELAY` (100 years)",
    "run_at": "a timezone-aware datetime within 100 years of now; not with `delay`",
    "dedup_key": "a non-empty string of at most `MAX_KEY_BYTES` bytes of UTF-8",
    "retry_on": "an exception class or a tuple of them (at `@app.task` only)",
    "exclusive_key": "a non-empty string of at most `MAX_KEY_BYTES` bytes of UTF-8",
    "meta": "a JSON object of at most `search.MAX_META_BYTES` (8192) bytes (per call only)",
    "tags": "a list of at most `search.MAX_TAGS` (32) strings of 1 to 64 characters; a call's add to the task's",
    "dedup_for": "a duration (`\"1h\"`, seconds, a timedelta) up to 100 years; needs `dedup_key` (per call)",
    "expires": "a duration above 0, up to 100 years, ending after the run time; not with `expires_at`",
    "expires_at": "a timezone-aware datetime after now and after the run time; not with `expires`",
    "limit_key": "a non-empty string of at most `MAX_KEY_BYTES` bytes of UTF-8, or a callable of the job's args "
                 "returning one (called at enqueue)",
}


def _task_options() -> list[str]:
    from tether import payload
    from tether.task import JobOptions

    out = ["## `@app.task(...)` and `task.using(...)`", "",
           "A task's options, set where it is registered (`@app.task(name=..., ...)`) and, but for `retry_on` "
           "and a callable `retry_backoff`, per call (`task.using(...).enqueue(...)`); `delay`, `run_at`, "
           "`dedup_key`, `exclusive_key` and `meta` are per call only. "
           f"`MAX_KEY_BYTES` is {payload.MAX_KEY_BYTES}.", "",
           "| option | default | bounds | what it is |", "|---|---|---|---|"]
    defaults = JobOptions()
    for name, comment in _class_fields(SRC / "task.py", "JobOptions").items():
        out.append(f"| `{name}` | {_code(repr(getattr(defaults, name)))} | {TASK_BOUNDS.get(name, '')} "
                   f"| {_cell(comment)} |")
    out.append("")
    return out


def settings_page() -> str:
    from tether import Tether, config

    out = ["# Settings", "",
           "Every setting with its default and the bounds tether enforces: a value outside them is refused "
           "with a `tether.ConfigError` (a bad database URL with `tether.InvalidDSN`) when the app or the "
           "worker starts, never later.", "",
           "## `Tether(...)`", "",
           "| setting | default | bounds |", "|---|---|---|"]
    bounds = {
        "url": "`sqlite:///PATH`, `postgresql://...` or `http(s)://HOST:PORT` (a tether server); see below",
        "lease_ttl": "seconds, positive and finite; at least `MIN_BEATS_PER_TTL` x `heartbeat_interval`",
        "heartbeat_interval": f"seconds, positive and finite; at most `lease_ttl` / {config.MIN_BEATS_PER_TTL}",
        "reaper_interval": "seconds, positive and finite",
        "max_payload_bytes": "bytes, at least 1 (a job's args and its result, as JSON)",
        "transport": "`notify`, `poll` or a `nats://HOST:PORT` URL (or a Transport)",
        "token": "a tether server's bearer token (http URLs only)",
        "retention": "seconds or a duration (`7d`) by state (`succeeded`, `cancelled`, `dead`); None: forever",
    }
    for name, param in inspect.signature(Tether.__init__).parameters.items():
        if name == "self":
            continue
        default = "" if param.default is inspect.Parameter.empty else _code(repr(param.default))
        if name == "url":
            default = f"`$TETHER_DATABASE_URL`, else {_code(config.DEFAULT_DATABASE_URL)}"
        elif name == "transport":
            default = "`$TETHER_TRANSPORT`, else `notify`"
        elif name == "token":
            default = "`$TETHER_TOKEN`"
        out.append(f"| `{name}` | {default} | {bounds.get(name, '')} |")
    out += ["", f"The three timers are `tether.Timers`: a heartbeat must land at least {config.MIN_BEATS_PER_TTL} "
            "times per lease, so one lost beat never costs a lease. A per-task or per-job `lease_ttl` "
            "(`@app.task(lease_ttl=...)`, `.using(lease_ttl=...)`) is checked against the app's "
            "`heartbeat_interval` the same way. A dead worker's job is claimable again within "
            "`lease_ttl + reaper_interval` (`Timers.recovery_bound`).", "",
            *_task_options(),
            "## Database URLs", "", _first_paragraph(config.parse_database_url.__doc__), "",
            f"- SQLite options (`sqlite:///tether.db?NAME=VALUE`): "
            f"{', '.join(_code(o) for o in sorted(config.SQLITE_OPTIONS))}.",
            "- PostgreSQL options, read by tether and not passed to the driver: `schema` (a plain identifier, "
            f"default `tether`), `pgbouncer` ({', '.join(_code(m) for m in config.POOLER_MODES)}) and "
            "`listen_url` (a direct server URL for LISTEN); every other option goes to libpq.",
            "- A tether server's URL options: `timeout` and `wait` (seconds, not negative; `timeout` above 0). "
            "The token never goes in the URL.", "",
            "## Defaults and limits in `tether.config`", "",
            "| name | value | what it is |", "|---|---|---|"]
    for name, comment in _module_constants(SRC / "config.py"):
        value = getattr(config, name)
        shown = sorted(value) if isinstance(value, frozenset) else value
        out.append(f"| `{name}` | {_code(repr(shown))} | {_cell(comment)} |")
    out += ["", "## Environment variables", "",
            "| variable | read by | meaning |", "|---|---|---|",
            "| `TETHER_DATABASE_URL` | `Tether()`, every command | the database URL when none is given |"]
    from tether.cli.main import cli
    root = click.Context(cli, info_name="tether")
    seen: dict[str, tuple[list[str], str]] = {}
    assert isinstance(cli, click.Group)
    for sub in cli.list_commands(root):
        cmd = cli.get_command(root, sub)
        assert cmd is not None
        for p in cmd.params:
            for env in [p.envvar] if isinstance(p.envvar, str) else (p.envvar or []):
                users, help_text = seen.setdefault(env, ([], getattr(p, "help", "") or ""))
                users.append(f"`tether {sub}` {p.opts[0]}")
    for env, (users, help_text) in sorted(seen.items()):
        out.append(f"| `{env}` | {', '.join(users)} | {_cell(help_text)} |")
    out.append("")
    return "\n".join(out)


# -- events and metrics -------------------------------------------------------------------------------------------

def events_page() -> str:
    from tether import events

    out = ["# Events", "", inspect.cleandoc(events.__doc__ or "").split("\n\n", 1)[1], "",
           "Subscribe with `@app.on(NAME)` (or `\"*\"` for every event); the hook gets a `tether.events.Event`.", "",
           "| event | when |", "|---|---|"]
    out += [f"| `{name}` | {_cell(meaning)} |" for name, meaning in events.EVENT_NAMES.items()]
    out += ["", "::: tether.events.Event", "    options:", "      heading_level: 2", ""]
    return "\n".join(out)


_METRIC_KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "GaugeMetricFamily": "gauge"}


def metrics_page() -> str:
    out = ["# Metrics", "",
           "What a worker's `--metrics-port` (and `tether dashboard`'s `/metrics`) exposes to Prometheus "
           "(`pip install 'tether[metrics]'`). Counters are exposed with the `_total` suffix, histograms as "
           "`_bucket`, `_sum` and `_count`.", "",
           "| metric | type | labels | meaning |", "|---|---|---|---|"]
    for node in ast.walk(ast.parse((SRC / "metrics.py").read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _METRIC_KINDS):
            continue
        name, help_text = (ast.literal_eval(a) for a in node.args[:2])
        labels: list[str] = []
        for a in [*node.args[2:3], *(k.value for k in node.keywords if k.arg in ("labels", "labelnames"))]:
            labels = list(ast.literal_eval(a))
        kind = _METRIC_KINDS[node.func.id]
        shown = f"{name}_total" if kind == "counter" else name
        out.append(f"| `{shown}` | {kind} | {', '.join(_code(label) for label in labels)} | {_cell(help_text)} |")
    out.append("")
    return "\n".join(out)


# -- schema -------------------------------------------------------------------------------------------------------

def schema_page() -> str:
    """Each backend's migrations, in order: what each says of itself (its
    leading comment) and its SQL, as ``tether migrate`` applies it."""
    out = ["# Database schema and migrations", "",
           "tether's tables are made and changed only by numbered migrations, one set per backend, applied in "
           "order by `tether migrate` (or `app.migrate()`); each runs once, recorded in the `migrations` table. "
           "On PostgreSQL they go in the URL's schema (`?schema=`, default `tether`), written `{schema}` below.",
           ""]
    for title, backend in (("PostgreSQL", "postgres"), ("SQLite", "sqlite")):
        out += [f"## {title}", ""]
        for path in sorted((SRC / "store" / backend / "migrations").glob("*.sql")):
            text = path.read_text()
            head = [ln[2:].strip() for ln in text.splitlines()[:40] if ln.startswith("--")]
            lead = " ".join(head[: head.index("") if "" in head else len(head)])
            out += [f"### `{path.name}` ({title})", "", lead, "",
                    f'??? note "The SQL of {path.name}"', "", "    ```sql",
                    *[f"    {ln}" if ln else "" for ln in text.rstrip().splitlines()], "    ```", ""]
    return "\n".join(out)


# -- the hook -----------------------------------------------------------------------------------------------------

def pages() -> dict[str, str]:
    """Every generated file, by its path in the site."""
    document = openapi_document()
    return {
        "reference/python.md": python_page(),
        "reference/cli.md": cli_page(),
        "reference/http.md": http_page(document),
        "reference/openapi.json": json.dumps(document, indent=2) + "\n",
        "reference/settings.md": settings_page(),
        "reference/events.md": events_page(),
        "reference/metrics.md": metrics_page(),
        "reference/schema.md": schema_page(),
    }


ROOT = SRC.parents[1]
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")
_IMAGES = (".png", ".svg", ".jpg", ".jpeg", ".gif")


def _outside(docs_dir: Path, page_src: str, target: str) -> Path | None:
    """The repository file a page's relative link names, when it is outside docs/."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^/", target):
        return None
    found = (docs_dir / page_src).parent.joinpath(target).resolve()
    if found.is_relative_to(docs_dir) or not found.is_relative_to(ROOT) or not found.is_file():
        return None
    return found


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    # pictures a page takes from the repository (bench/results/...): copied
    # into the site under _repo/, where on_page_markdown points them
    docs_dir = Path(config["docs_dir"]).resolve()
    wanted: set[Path] = set()
    for f in files.documentation_pages():
        if f.abs_src_path is None:  # a generated page
            continue
        for m in _LINK.finditer(Path(f.abs_src_path).read_text()):
            found = _outside(docs_dir, f.src_uri, m[3])
            if found is not None and found.suffix in _IMAGES:
                wanted.add(found)
    for found in sorted(wanted):
        files.append(File.generated(config, f"_repo/{found.relative_to(ROOT)}", abs_src_path=str(found)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links to repository files outside docs/ (the README, bench/): a
    picture points at its copy in the site; another file is named as a path
    in the repository, since the site cannot serve it as the repository does."""
    docs_dir = Path(config["docs_dir"]).resolve()
    depth = page.file.src_uri.count("/")  # mkdocs turns a link to a site file into its URL

    def rewrite(m: re.Match[str]) -> str:
        found = _outside(docs_dir, page.file.src_uri, m[3])
        if found is None:
            return m[0]
        rel = found.relative_to(ROOT).as_posix()
        if m[1] and found.suffix in _IMAGES:
            return f"![{m[2]}]({'../' * depth}_repo/{rel})"
        text = m[2] if m[2].strip("`") == rel or rel in m[2] else f"{m[2]} (`{rel}`)"
        return text if rel in text else f"{text} (`{rel}`)"

    return _LINK.sub(rewrite, markdown)
