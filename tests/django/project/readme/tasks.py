# readme/tasks.py
from django.core.mail import send_mail
from django.tasks import task


@task(queue_name="emails", max_attempts=5, timeout=60)  # tether's options: Django 6.1+
def send_welcome(user_email: str) -> int:
    return send_mail("Welcome", "Glad you're here.", None, [user_email])


@task(takes_context=True)
def report(context, n: int) -> str:
    context.job.progress(0.5, "halfway")  # tether's JobContext for this attempt
    return f"report {n}, attempt {context.attempt}"
