"""HTTP URLs of the agents app."""

from django.urls import path

from . import views

app_name = "agents_app"

urlpatterns = [
    path("", views.instance_list, name="instance-list"),
    path("chat/open/", views.open_chat, name="open-chat"),
    path("chat/<str:slug>/<str:name>/", views.chat, name="chat"),
    path("agents/<str:slug>/<str:name>/get-messages", views.get_messages, name="get-messages"),
]
