"""HTTP URLs of the agents app."""

from django.urls import path

from . import views

app_name = "agents_app"

urlpatterns = [
    path("", views.instance_list, name="instance-list"),
    path("chat/new/", views.new_chat, name="new-chat"),
    path("chat/<str:slug>/<str:name>/", views.chat, name="chat"),
    path("agents/<str:slug>/<str:name>/get-messages", views.get_messages, name="get-messages"),
]
