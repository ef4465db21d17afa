"""The how-to "Transactions", on SQLite: a job enqueued inside your own
transaction, and a handler's writes committed with its fenced success. The
same calls take a psycopg 3 connection on PostgreSQL (tests/test_tx_*.py run
both). Run by tests/test_docs_guides.py as a script."""

import sqlite3

from tether import JobContext, Tether

app = Tether("sqlite:///shop.db")


@app.task
def send_receipt(ctx: JobContext, order_id: int) -> None: ...


# --8<-- [start:complete]
@app.task
def charge(ctx: JobContext, order_id: int) -> dict[str, int]:
    with ctx.transaction() as conn:  # `async with ctx.transaction() as conn` in async def handlers
        conn.execute("UPDATE accounts SET balance = balance - 10 WHERE order_id = ?", (order_id,))
    return {"charged": 10}  # still the job's result
# --8<-- [end:complete]


# --8<-- [start:on-yours]
@app.task
def refund(ctx: JobContext, order_id: int) -> None:
    conn = sqlite3.connect("shop.db", isolation_level=None)  # yours (an ORM's), to the jobs' database
    conn.execute("BEGIN")  # psycopg: `with conn.transaction():` around the block
    with ctx.transaction_on(conn) as tx:  # tx: the handle, not a connection
        conn.execute("UPDATE accounts SET balance = balance + 10 WHERE order_id = ?", (order_id,))
    conn.execute("COMMIT")
    tx.committed()  # after your commit (tx.failed() after a rollback)
    conn.close()
# --8<-- [end:on-yours]


if __name__ == "__main__":
    app.migrate()
    setup = sqlite3.connect("shop.db")
    setup.executescript("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);"
                        "CREATE TABLE accounts (order_id INTEGER, balance INTEGER);"
                        "INSERT INTO accounts VALUES (42, 100);")
    setup.close()
    # --8<-- [start:enqueue]
    conn = sqlite3.connect("shop.db")  # yours: psycopg.connect(url) on PostgreSQL, with %s placeholders
    with conn:  # one transaction: commits, or rolls back on an exception
        conn.execute("INSERT INTO orders (id, total) VALUES (?, ?)", (42, 10))
        job_id = send_receipt.using(connection=conn).enqueue(order_id=42)  # commits or rolls back with the order
        assert app.get_job(job_id, connection=conn) is not None  # seen on your connection before the commit
    # --8<-- [end:enqueue]
    try:
        with conn:
            conn.execute("INSERT INTO orders (id, total) VALUES (?, ?)", (43, 10))
            rolled_back = send_receipt.using(connection=conn).enqueue(order_id=43)
            raise RuntimeError("the order fails")
    except RuntimeError:
        pass
    assert app.get_job(rolled_back) is None or app.get_job(rolled_back).args != {"order_id": 43}
    conn.close()
    charged = charge.enqueue(order_id=42)
    app.drain()
    assert app.wait(job_id, timeout=5).state.value == "succeeded"
    assert app.wait(charged, timeout=5).result == {"charged": 10}
    check = sqlite3.connect("shop.db")
    assert check.execute("SELECT balance FROM accounts").fetchone() == (90,)
    refunded = refund.enqueue(order_id=42)
    app.drain()
    assert app.wait(refunded, timeout=5).state.value == "succeeded"
    assert check.execute("SELECT balance FROM accounts").fetchone() == (100,)
    check.close()
    app.close()
    print("ok")
