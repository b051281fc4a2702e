"""HTTP URLs of the agents app."""

from django.urls import path, re_path

from . import views

app_name = "agents_app"

urlpatterns = [
    path("", views.instance_list, name="instance-list"),
    path("chat/new/", views.new_chat, name="new-chat"),
    path("chat/<str:slug>/<str:name>/", views.chat, name="chat"),
    path("agents/<str:slug>/<str:name>/get-messages", views.get_messages, name="get-messages"),
    # A sub-agent's pages: its parent's address plus /sub/<slug>/<name> (at any depth).
    re_path(r"^chat/(?P<slug>[^/]+)/(?P<name>[^/]+)(?P<sub>(?:/sub/[^/]+/[^/]+)+)/$", views.chat, name="sub-chat"),
    re_path(r"^agents/(?P<slug>[^/]+)/(?P<name>[^/]+)(?P<sub>(?:/sub/[^/]+/[^/]+)+)/get-messages$",
            views.get_messages, name="sub-get-messages"),
]
