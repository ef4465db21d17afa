from tether import JobContext, Tether

app = Tether()  # TETHER_DATABASE_URL, else sqlite:///tether.db


@app.task
def send_welcome(ctx: JobContext, user_id: int) -> str:
    ctx.progress(0.5, "rendering")
    return f"welcome sent to {user_id}"


def sign_up(user_id: int) -> None:
    # ... create the user, then:
    send_welcome.enqueue(user_id=user_id)
