"""The environment variables the hub's client side reads, named once.

They live apart from :mod:`gymhub.hub.client` so that modules which only need the names
(``gymhub env init`` reads the token to default the owner) do not import httpx: the
scaffold must work with gymhub's core dependencies alone.
"""

from __future__ import annotations

__all__ = ["HUB_URL_ENV", "TOKEN_ENV"]

#: The hub to talk to when no ``--hub URL`` is given.
HUB_URL_ENV = "GYMHUB_HUB_URL"
#: The hub token (``ghub_...``): it authorises pushes, and its owner is the default owner.
TOKEN_ENV = "GYMHUB_HUB_TOKEN"
