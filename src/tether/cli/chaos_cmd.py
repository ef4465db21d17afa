"""``tether chaos``: run real workers under real faults against a database and
say whether the contract held there."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..chaos.driver import FAULTS, ChaosConfig, ChaosResult, run
from .common import EXIT_FAILURE, Seconds, make_console


def _faults(value: str) -> frozenset[str]:
    return frozenset(f.strip() for f in value.split(",") if f.strip())


def render(result: ChaosResult, console: Console) -> None:
    d = result.to_dict()
    cfg = d["config"]
    console.rule("tether chaos")
    console.print(f"backend {cfg['backend']}  workers {cfg['workers']}  jobs {d['enqueued']}  "
                  f"duration {cfg['duration_s']:g}s  seed {cfg['seed']}  faults {','.join(cfg['faults']) or 'none'}")
    console.print(f"timers: lease_ttl {cfg['lease_ttl']:g}s  heartbeat {cfg['heartbeat_interval']:g}s  "
                  f"reaper {cfg['reaper_interval']:g}s  (bound {d['check']['bound_s']:g}s)")
    console.print(f"faults injected: {d['faults'] or 'none'}")
    table = Table("invariant", "verdict", "checked", "violations")
    for key, inv in d["check"]["invariants"].items():
        table.add_row(f"{key} {inv['title']}", "[green]held[/green]" if inv["ok"] else "[red]BROKEN[/red]",
                      str(inv["checked"]), str(inv["violation_count"]))
    console.print(table)
    i7 = d["check"]["invariants"].get("I7")
    if i7 is not None:
        console.print(f"I7 exactly-once effects: {d['check']['counts'].get('effect_rows', 0)} effect rows for "
                      f"{i7['checked']} transactional jobs: "
                      + ("[green]held[/green]" if i7["ok"] else f"[red]BROKEN[/red] ({i7['violation_count']})"))
    i8, c = d["check"]["invariants"].get("I8"), d["check"]["counts"]
    if i8 is not None:
        raw = (f"; the raw timestamps overlap {c['limits_raw_overlaps']} times, longest {c['limits_raw_longest_ms']} "
               f"ms (tolerated up to {c['limits_skew_ms']} ms: claimed_at is the claim's transaction start)"
               if c.get("limits_raw_overlaps") else "")
        console.print(f"I8 queue and key limits: {c['limits_limited_attempts']} attempts on the limited queue, at most "
                      f"{c['limits_limited_peak']} open at once (concurrency {c['limits_concurrency']}); "
                      f"{c['limits_keyed_attempts']} with an exclusive key, at most {c['limits_key_peak']} per key; "
                      f"{c.get('limits_limit_keyed_attempts', 0)} with a limit key, at most "
                      f"{c.get('limits_limit_key_peak', 0)} per key (concurrency {c.get('limits_key_concurrency')})"
                      f"{raw}: " + ("[green]held[/green]" if i8["ok"] else f"[red]BROKEN[/red] ({i8['violation_count']})"))
    i9 = d["check"]["invariants"].get("I9")
    if i9 is not None:
        console.print(f"I9 dependencies: {c.get('i9_workflows', 0)} workflows and {c.get('i9_batch_members', 0)} batch "
                      f"members (+{c.get('i9_batch_members_added', 0)} added by members; "
                      f"{c.get('i9_bulk_cancelled', 0)} steps bulk-cancelled, {c.get('i9_expired', 0)} expired); "
                      f"{i9['checked']} jobs that waited: {c.get('i9_released', 0)} released, "
                      f"{c.get('i9_cancelled', 0)} cancelled by a failed dependency, {c.get('i9_callbacks_fired', 0)} "
                      f"batch callbacks fired; {c.get('i9_starts', 0)} starts, after their dependencies; longest "
                      f"release after the deciding ending {c.get('i9_release_lag_max_ms', 0)} ms: "
                      + ("[green]held[/green]" if i9["ok"] else f"[red]BROKEN[/red] ({i9['violation_count']})"))
    rec = d["check"]["recovery_s"]

    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}s"

    console.print(f"recovery (last renewal -> reaped): {rec['recoveries']} recoveries, p50 {s(rec['p50'])}, "
                  f"p99 {s(rec['p99'])}, max {s(rec['max'])}; to the next claim: p50 "
                  f"{s(rec['to_next_claim_p50'])}, p99 {s(rec['to_next_claim_p99'])}, "
                  f"max {s(rec['to_next_claim_max'])}")
    if rec.get("renewals_unheard"):
        console.print(f"  of which {rec['renewals_unheard']} last renewed by a write the worker never heard back "
                      "about (timed from the database's lease_until - ttl)")
    if rec.get("no_healthy_windows"):
        # Faults and failpoints together may leave no worker healthy for a while;
        # I5 promises recovery by a healthy worker, so that time is not charged.
        console.print(f"no healthy worker (all killed, stopped or cut off): {rec['no_healthy_windows']} windows, "
                      f"{rec['no_healthy_s']}s in all; {rec['waited_on_no_healthy']} recoveries waited on one "
                      f"(longest wait {s(rec['waited_on_no_healthy_max'])}), and I5 did not count that time "
                      "against the bound")
        for line in d["check"]["i5_not_judged"][:10]:
            console.print(f"  I5 not judged: {line}")
        if len(d["check"]["i5_not_judged"]) > 10:
            console.print(f"  ... and {len(d['check']['i5_not_judged']) - 10} more (--json lists them all)")
    if rec["outages"]:
        console.print(f"database outages (server restarts): {rec['outages']}, {rec['outage_s']}s in all; "
                      f"recoveries with no outage in their window: {rec['no_outage_recoveries']}, p50 "
                      f"{s(rec['no_outage_p50'])}, p99 {s(rec['no_outage_p99'])}, max {s(rec['no_outage_max'])}")
    if d["check"]["counts"].get("prefetched"):
        console.print(f"prefetch: {d['check']['counts']['prefetched']} jobs waited in a worker's buffer for a slot, "
                      f"{d['check']['counts']['prefetch_handed_back']} of them handed back")
    if d["check"]["expected_loss"]:
        _failovers(d["check"]["expected_loss"], console)
    console.print(f"final states: { {k[6:]: v for k, v in d['check']['counts'].items() if k.startswith('state_')} }  "
                  f"attempts {d['check']['counts']['attempts']}")
    if d["integrity"] != ["ok"]:
        console.print(f"[red]integrity check failed:[/red] {d['integrity'][:5]}")
    elif cfg["backend"] == "sqlite":
        console.print(f"SQLite PRAGMA integrity_check after every death and at the end "
                      f"({d['integrity_checks']} checks): ok")
    if not d["drained"]:
        console.print("[red]the queue did not drain before the drain timeout[/red]")
    for key, inv in d["check"]["invariants"].items():
        for v in inv["violations"][:10]:
            console.print(f"[red]{key}[/red] {v}")
    console.print("[bold green]verdict: the contract held[/bold green]" if result.ok
                   else "[bold red]verdict: the contract was BROKEN[/bold red]")


def _failovers(loss: dict[str, Any], console: Console) -> None:
    """The failover fault's line: what the failovers cost, and with asynchronous
    replication what they lost, which the verdict expects (README: Failover)."""
    console.print(f"failovers ({loss['replication']} replication): {loss['failovers']}, writes stopped "
                  f"{loss['write_outage_s']}s in all (kill -> promoted), no standby {loss['no_standby_s']}s "
                  "(promoted -> a rebuilt standby streams; no failover then)")
    lost = (f"{loss['enqueues_lost']} acknowledged enqueues ({loss['enqueues_lost_id_reused']} of their ids handed "
            f"out again), {loss['completions_lost']} completions, {loss['failures_lost']} failures and "
            f"{loss['releases_lost']} releases; {loss['attempts_granted_twice']} attempt numbers granted twice, and "
            f"the losing owner's {loss['stale_writes_after_failover']} writes after the failover: "
            f"{loss['stale_writes_refused']} refused by locked_by")
    if loss["replication"] == "synchronous":
        console.print(f"  acknowledged and lost: {lost}")
        return
    console.print(f"  [yellow]expected async loss[/yellow] in {loss['loss_window_s']}s of loss windows (last commit the "
                  f"standby replayed -> kill), {loss['jobs_touched_by_loss']} jobs touched: {lost}; "
                  f"{loss['violations_excused']} invariant violations on those jobs set aside as that loss")
    for line in loss["excused"][:10]:
        console.print(f"  expected: {line}")


@click.command()
@click.option("--database", "database", metavar="URL",
              help="PostgreSQL or SQLite URL to test against; chaos works in a schema (or file) of its own "
                   "and removes it afterwards. Default: a scratch SQLite file.")
@click.option("--scratch-postgres", is_flag=True,
              help="Start a private PostgreSQL server for the run (needed for the restart fault).")
@click.option("--workers", type=click.IntRange(min=1, max=32), default=3, show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), default=300, show_default=True)
@click.option("--duration", type=Seconds(), default=60.0, show_default=True, help="Seconds of faults.")
@click.option("--faults", default="kill,stop", show_default=True, metavar="LIST",
              help=f"Comma-separated, from: {', '.join(FAULTS)}.")
@click.option("--seed", type=int, help="Reproduce a run's fault schedule (default: random, printed).")
@click.option("--lease-ttl", type=Seconds(), default=2.0, show_default=True)
@click.option("--heartbeat-interval", type=Seconds(), default=0.5, show_default=True)
@click.option("--reaper-interval", type=Seconds(), default=1.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--drain-timeout", type=Seconds(), default=120.0, show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON here ('-' for stdout).")
@click.option("--keep", is_flag=True, help="Keep the chaos schema/file and the history for inspection.")
@click.option("--transport", metavar="notify|poll|nats://HOST:PORT",
              help="How job ids reach the workers (default: the database); a NATS URL without ?prefix= gets "
                   "a stream of the run's own, deleted at the end.")
@click.option("--replication", type=click.Choice(["sync", "async"]), default="sync", show_default=True,
              help="The failover fault's standby: synchronous (a commit is acknowledged once the standby holds "
                   "it: nothing acknowledged is lost) or asynchronous (what was not yet shipped is lost, measured).")
@click.option("--artifacts", type=click.Path(file_okay=False, path_type=Path),
              help="Copy the history and worker logs here.")
def chaos(database: str | None, scratch_postgres: bool, workers: int, jobs: int, duration: float, faults: str,
          seed: int | None, lease_ttl: float, heartbeat_interval: float, reaper_interval: float,
          concurrency: int, drain_timeout: float, json_out: Path | None, keep: bool,
          transport: str | None, replication: str, artifacts: Path | None) -> None:
    """Run workers under faults and check the contract (I1-I9) held."""
    console = make_console()
    seed = random.randrange(2**31) if seed is None else seed
    cfg = ChaosConfig(
        database=database, scratch_postgres=scratch_postgres, workers=workers, jobs=jobs, duration=duration,
        faults=_faults(faults), seed=seed, lease_ttl=lease_ttl, heartbeat_interval=heartbeat_interval,
        reaper_interval=reaper_interval, concurrency=concurrency, drain_timeout=drain_timeout, keep=keep,
        out_dir=artifacts, transport=transport, replication=replication,
    )
    console.print(f"tether chaos: seed {seed} (rerun with --seed {seed})")
    result = run(cfg, say=console.print)
    render(result, console)
    if json_out is not None:
        text = json.dumps(result.to_dict(), indent=2, default=str)
        if str(json_out) == "-":
            click.echo(text)
        else:
            json_out.write_text(text)
    if not result.ok:
        raise click.exceptions.Exit(EXIT_FAILURE)
