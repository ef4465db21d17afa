from django.urls import path
from readme import views as readme_views
from shop import views

urlpatterns = [
    path("order/", views.place_order),
    path("signup/", readme_views.sign_up),
    path("status/<str:result_id>/", readme_views.task_status),
]
