"""Project URLs: the agents app, the admin, accounts, the REST API and its schema; error handlers."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiJsonRenderer2, OpenApiYamlRenderer
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from accounts.views import LoginView
from agents_app.metrics import views as metrics
from agents_app.operations import views as operations_views

# application/json first: what a browser (and any client without a preference) gets, shown in place.
SCHEMA_RENDERERS = [OpenApiJsonRenderer2, OpenApiJsonRenderer, OpenApiYamlRenderer]

urlpatterns = [
    path("admin/", admin.site.urls),
    # Probes for load balancers and orchestrators: JSON, no login (docs/operations.md#probes).
    path("healthz", operations_views.healthz, name="healthz"),
    path("readyz", operations_views.readyz, name="readyz"),
    # Ours first (its page links sign-up and reset), then sign-up and invitations, then Django's own
    # logout, password reset and password change, drawn by templates/registration/.
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/", include("accounts.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    # The schema (JSON first, so a browser shows it; ?format=yaml for YAML) and its docs, served
    # from /static/ (drf-spectacular-sidecar: no CDN), before the API's own routes.
    path("api/schema/", SpectacularAPIView.as_view(renderer_classes=SCHEMA_RENDERERS), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api/", include("agents_app.api.urls")),
    # Prometheus, for the addresses or token of AGENT_METRICS_* (docs/operations.md#metrics).
    path("metrics", metrics.metrics, name="metrics"),
    # Browsers ask for /favicon.ico on pages that name no icon (the admin, the API docs).
    path("favicon.ico", RedirectView.as_view(url=static("agents_app/favicon.ico"), permanent=True)),
    path("", include("agents_app.web.urls")),
]

# Pages in the site's style for people, JSON for API clients (thinkproject/errors.py).
handler400 = "thinkproject.errors.bad_request"
handler403 = "thinkproject.errors.permission_denied"
handler404 = "thinkproject.errors.page_not_found"
handler500 = "thinkproject.errors.server_error"
