"""How callers prove who they are, for every endpoint of the API.

Who may do what is decided by each feature's permission classes, which delegate to the predicates
the admin and the chat socket use (e.g. ``approvals.api.CanApproveActions``); who may read a
conversation is decided where its address is resolved (``registry.resolve``).
"""

from rest_framework.authentication import SessionAuthentication, TokenAuthentication

# How callers prove who they are: a token (``Authorization: Token <key>``) or the browser's session.
# Token first: DRF answers an anonymous request with the first class's ``WWW-Authenticate``
# header, and session authentication has none, which would turn "log in" (401) into 403.
AUTHENTICATION_CLASSES = [TokenAuthentication, SessionAuthentication]
