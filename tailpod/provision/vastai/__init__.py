"""vast.ai adapter (offer search, rent, paginated listing, destroy) over httpx."""

from tailpod.provision.vastai.provider import VastProvider

__all__ = ["VastProvider"]
