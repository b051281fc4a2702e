"""Invitation links: a signed, expiring token that carries the invited email address.

Nothing is stored: the signature (``SECRET_KEY``, salted) proves staff made the link, its
timestamp limits it to ``INVITATION_MAX_AGE`` (a timedelta), and an account with that email address
ends it (a link makes one account).
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing

SALT = "accounts.invitation"


class InvalidInvitation(Exception):
    """The link is not one staff made, has expired, or was used already; the message says which."""


def make_token(email: str) -> str:
    return signing.dumps({"email": email}, salt=SALT)


def email_of(token: str) -> str:
    """The invited email address of a usable invitation.

    Raises:
        InvalidInvitation: a forged, garbled or expired link, or one already used.
    """
    try:
        email = signing.loads(token, salt=SALT, max_age=settings.INVITATION_MAX_AGE)["email"]
    except signing.SignatureExpired:
        raise InvalidInvitation("This invitation has expired. Ask for a new one.") from None
    except (signing.BadSignature, KeyError, TypeError):
        raise InvalidInvitation("This is not a valid invitation link.") from None
    if email_taken(email):
        raise InvalidInvitation("This invitation was used already. Log in, or reset your password.")
    return str(email)


def email_taken(email: str) -> bool:
    return get_user_model()._default_manager.filter(email__iexact=email).exists()
