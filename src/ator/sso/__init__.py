"""Single sign-on for the console (layer: sso — a service beside webhooks; imports
agent.extension, net, security, store, settings, errors, authlib, joserfc): OpenID Connect
with PKCE per org, onto the console's cookie session."""

from ator.sso.extension import SsoExtension
from ator.sso.service import Login, Sso, SsoRefused

__all__ = ["Login", "Sso", "SsoExtension", "SsoRefused"]
