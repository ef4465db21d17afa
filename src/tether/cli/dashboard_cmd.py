"""``tether dashboard``: serve the web dashboard over ``--database``."""

from __future__ import annotations

import ipaddress
import secrets
from typing import TYPE_CHECKING

import click

from ..config import redact_url
from .common import PUBLISH_OPTION, BadUsage, CLIState, opened
from .http_options import configure_logging, limit_options

if TYPE_CHECKING:
    from ..server.connections import Limits

__all__ = ["dashboard", "host_allow_list"]

#: the bind addresses that mean every interface
WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", "-p", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--token", envvar="TETHER_DASHBOARD_TOKEN", metavar="TOKEN",
              help="Token to log in with and for Bearer access to /metrics (env TETHER_DASHBOARD_TOKEN); "
                   "default: a random one, printed at start.")
@click.option("--no-auth", is_flag=True, help="Serve without authentication (anyone who can reach it may act).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A host name browsers reach the dashboard by (behind a proxy or a domain); repeatable; "
                   "'*.example.com' for its subdomains, '*' for any name. Other Host headers get a 400 "
                   "(against DNS rebinding). Default: the --host address (with localhost, 127.0.0.1 and [::1] "
                   "on a loopback one); on 0.0.0.0 or ::, any name when a login is required, and none, so "
                   "give them, with --no-auth.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True,
              help="Of tether's lines: failed logins, refused connections and requests.")
@PUBLISH_OPTION
@limit_options
@click.pass_obj
def dashboard(state: CLIState, host: str, port: int, token: str | None, no_auth: bool,
              allowed_hosts: tuple[str, ...], log_level: str, transport: str | None, limits: Limits) -> None:
    """Serve the dashboard: queues, jobs, attempts, workers, recoveries; cancel and retry."""
    try:
        from ..dashboard import create_app
        from ..metrics import Metrics
        from ..server.auth import MIN_TOKEN_LENGTH
        from ..server.run import serve
    except ImportError as exc:
        raise BadUsage(f"the dashboard needs its extra: pip install 'tether[dashboard]' ({exc})") from None
    if no_auth and token:
        raise BadUsage("give either --token or --no-auth, not both")
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise BadUsage(f"--token must be at least {MIN_TOKEN_LENGTH} characters, as a server token must (e.g. "
                       "from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    names = host_allow_list(host, allowed_hosts, auth=not no_auth)
    if not no_auth and token is None:
        token = secrets.token_urlsafe(24)
        click.echo(f"dashboard token (log in with it): {token}", err=True)
    if no_auth and not _loopback(host):
        click.echo(f"warning: serving {host} without authentication: anyone who reaches it can cancel and "
                   "retry jobs", err=True)
    configure_logging(log_level)
    with opened(state, transport=transport) as app:  # its retry actions publish there
        app.store.check_schema()
        metrics = Metrics().attach(app).watch_store(app.store)
        web = create_app(app, token=None if no_auth else token, metrics=metrics, allowed_hosts=names)
        click.echo(f"tether dashboard for {redact_url(state.database)} on http://{host}:{port}/", err=True)
        serve(web, host, port, log_level="warning", limits=limits)


def host_allow_list(host: str, given: tuple[str, ...], *, auth: bool) -> list[str]:
    """The Host names the dashboard answers to, bound to ``host``: the bind
    address itself (and the loopback names on a loopback address) plus the
    ``--allowed-host`` names. Bound to every address (0.0.0.0, ::) it cannot
    know its names: any, when a login stands in front of the pages (a
    rebinding page has no session); with --no-auth, the names must be given."""
    from ..dashboard.security import LOOPBACK_HOSTS  # the extra is installed: the caller checked

    extra = list(given)
    if _loopback(host):
        return [host, *LOOPBACK_HOSTS, *extra]
    if host not in WILDCARDS:
        return [host, *extra]
    if extra:
        return [*LOOPBACK_HOSTS, *extra]
    if not auth:
        raise BadUsage(f"--host {host} with --no-auth needs --allowed-host NAME (each host name browsers reach "
                       "the dashboard by): without a login, a page on any web site could otherwise reach it by "
                       "DNS rebinding. --allowed-host '*' accepts any name, at that risk.")
    return ["*"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
