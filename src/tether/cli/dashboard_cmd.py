"""``tether dashboard``: serve the web dashboard over ``--database``."""

from __future__ import annotations

import ipaddress
import secrets

import click

from .common import PUBLISH_OPTION, BadUsage, CLIState, mask_url, opened

__all__ = ["dashboard"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", "-p", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--token", envvar="TETHER_DASHBOARD_TOKEN", metavar="TOKEN",
              help="Token to log in with and for Bearer access to /metrics (env TETHER_DASHBOARD_TOKEN); "
                   "default: a random one, printed at start.")
@click.option("--no-auth", is_flag=True, help="Serve without authentication (anyone who can reach it may act).")
@PUBLISH_OPTION
@click.pass_obj
def dashboard(state: CLIState, host: str, port: int, token: str | None, no_auth: bool, transport: str | None) -> None:
    """Serve the dashboard: queues, jobs, attempts, workers, recoveries; cancel and retry."""
    try:
        import uvicorn

        from ..dashboard import create_app
        from ..metrics import Metrics
    except ImportError as exc:
        raise BadUsage(f"the dashboard needs its extra: pip install 'tether[dashboard]' ({exc})") from None
    if no_auth and token:
        raise BadUsage("give either --token or --no-auth, not both")
    if token is not None and len(token) < 8:
        raise BadUsage("--token must be at least 8 characters")
    if not no_auth and token is None:
        token = secrets.token_urlsafe(24)
        click.echo(f"dashboard token (log in with it): {token}", err=True)
    if no_auth and not _loopback(host):
        click.echo(f"warning: serving {host} without authentication: anyone who reaches it can cancel and "
                   "retry jobs", err=True)
    with opened(state, transport=transport) as app:  # its retry actions publish there
        app.store.check_schema()
        metrics = Metrics().attach(app).watch_store(app.store)
        web = create_app(app, token=None if no_auth else token, metrics=metrics)
        click.echo(f"tether dashboard for {mask_url(state.database)} on http://{host}:{port}/", err=True)
        uvicorn.run(web, host=host, port=port, log_level="warning")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
