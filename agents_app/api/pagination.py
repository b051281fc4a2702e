"""Pagination the API's long lists share."""

from rest_framework.pagination import CursorPagination


class OldestFirstCursorPagination(CursorPagination):
    """Oldest first, a fixed page size, and a cost per page that does not grow with the table.

    A cursor is a seek on the ``created_at`` index rather than an OFFSET, and there is no
    ``COUNT(*)``: page 2,000 of 100,000 rows costs what page 1 does.
    """

    page_size = 50
    ordering = ("created_at", "execution_id")
