from tasks import send_welcome, sign_up

from tether import JobContext, Outcome, Tether
from tether.testing import assert_enqueued, assert_not_enqueued, context


def test_sign_up_sends_a_welcome(tether_app: Tether) -> None:
    sign_up(user_id=7)
    assert_enqueued(send_welcome, user_id=7)
    [ran] = tether_app.drain()  # a real worker, here, until no job is due
    assert ran.outcome is Outcome.SUCCEEDED and ran.result == "welcome sent to 7"
    assert_not_enqueued(send_welcome)


def test_the_handler_alone() -> None:
    ctx = context(job_id=1, attempt=1)
    assert send_welcome(ctx, user_id=7) == "welcome sent to 7"
    assert ctx.progress_reports == [(0.5, "rendering")]


def test_without_the_plugin() -> None:
    app = Tether("sqlite:///:memory:")  # private to this object, tables created on first use

    @app.task
    def shout(ctx: JobContext, word: str) -> str:
        return word.upper()

    shout.enqueue(word="hi")
    assert [r.result for r in app.drain()] == ["HI"]
