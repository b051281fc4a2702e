"""API routes, mounted at ``/api/`` by ``thinkproject/urls.py``."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

app_name = "api"

router = SimpleRouter()
router.register("approvals", views.PendingApprovalViewSet, basename="approval")

urlpatterns = [
    *router.urls,
    path("agents/<str:slug>/<str:name>/messages/", views.InstanceMessagesView.as_view(), name="instance-messages"),
]
