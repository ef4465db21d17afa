"""A view that records an order and enqueues its email in one transaction;
``fail=1`` rolls both back after the enqueue."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import send_receipt


class Refused(Exception):
    pass


def place_order(request: HttpRequest) -> JsonResponse:
    backend = request.POST["backend"]
    database = "pg" if backend == "pg" else "default"
    result_id = None
    try:
        with transaction.atomic(using=database):
            order = Order.objects.using(database).create(email=request.POST["email"])
            result = send_receipt.using(backend=backend).enqueue(order_id=order.id, email=order.email,
                                                                database=database)
            result_id = result.id
            if request.POST.get("fail"):
                raise Refused
    except Refused:
        return JsonResponse({"result_id": result_id, "committed": False}, status=409)
    return JsonResponse({"result_id": result_id, "order_id": order.id, "committed": True})
