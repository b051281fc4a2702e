"""API routes, mounted at ``/api/`` by ``thinkproject/urls.py``."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from ..approvals import api as approvals
from ..conversations import api as conversations
from ..schedules import api as schedules
from ..usage import api as usage
from . import views

app_name = "api"

router = SimpleRouter()
router.register("approvals", approvals.PendingApprovalViewSet, basename="approval")
router.register("schedules", schedules.ScheduleViewSet, basename="schedule")

urlpatterns = [
    path("", views.ApiRootView.as_view(), name="root"),
    *router.urls,
    path("instances/", conversations.InstanceListView.as_view(), name="instances"),
    path("agents/<str:slug>/<str:name>/", conversations.InstanceView.as_view(), name="instance"),
    path("agents/<str:slug>/<str:name>/messages/", conversations.InstanceMessagesView.as_view(),
         name="instance-messages"),
    path("agents/<str:slug>/<str:name>/turns/<str:request_id>/", conversations.TurnView.as_view(), name="turn"),
    path("usage/", usage.UsageView.as_view(), name="usage"),
]
