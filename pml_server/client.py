"""The typed client, kept importable here for compatibility: it lives in the pml-client package
(clients/python/pml_client; docs/architecture.md, Packages)."""

from pml_client.client import *  # noqa: F403
from pml_client.client import _too_big as _too_big
from pml_client.errors import *  # noqa: F403
