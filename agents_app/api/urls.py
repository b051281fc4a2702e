"""API routes, mounted at ``/api/`` by ``thinkproject/urls.py``."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import schedules, views

app_name = "api"

router = SimpleRouter()
router.register("approvals", views.PendingApprovalViewSet, basename="approval")
router.register("schedules", schedules.ScheduleViewSet, basename="schedule")

urlpatterns = [
    *router.urls,
    path("agents/<str:slug>/<str:name>/messages/", views.InstanceMessagesView.as_view(), name="instance-messages"),
]
