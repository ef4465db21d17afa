# readme/views.py
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.tasks import TaskResultStatus

from .tasks import send_welcome


def sign_up(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        user = User.objects.create(username=request.POST["email"], email=request.POST["email"])
        result = send_welcome.enqueue(user.email)  # commits, or rolls back, with the user
    return JsonResponse({"task": result.id})


def task_status(request: HttpRequest, result_id: str) -> JsonResponse:
    result = send_welcome.get_result(result_id)
    sent = result.return_value if result.status == TaskResultStatus.SUCCESSFUL else None
    return JsonResponse({"status": result.status, "attempts": result.attempts, "sent": sent})
