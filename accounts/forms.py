"""Forms of the accounts pages: sign-up (also the end of an invitation) and the invitation itself."""

from typing import Any

from django import forms
from django.contrib.auth.forms import UserCreationForm

from .invitations import email_taken

TAKEN = "There is already an account with this email address."


class SignupForm(UserCreationForm):
    """A username, an email address (for password resets) and a password, checked by the validators."""

    email = forms.EmailField(help_text="Used only to reset your password.")

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if email_taken(email):
            raise forms.ValidationError(TAKEN)
        return str(email)


class InvitationSignupForm(SignupForm):
    """Sign-up through an invitation: the email address is the invited one, not typed."""

    def __init__(self, *args: Any, email: str, **kwargs: Any) -> None:
        super().__init__(*args, initial={"email": email}, **kwargs)
        self.fields["email"].disabled = True


class InviteForm(forms.Form):
    email = forms.EmailField(label="Email address of the person to invite")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if email_taken(email):
            raise forms.ValidationError(TAKEN)
        return str(email)
