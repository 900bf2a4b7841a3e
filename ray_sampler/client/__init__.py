"""The client of an external env runner: what a simulator outside Ray imports (numpy and the standard
library only; this package imports nothing else, not Ray, so it can be copied into a simulator)."""

from .local_policy import LocalPolicy
from .policy_client import PolicyClient
from .protocol import PROTOCOL_VERSION, ProtocolError, ServerError

__all__ = ["PROTOCOL_VERSION", "LocalPolicy", "PolicyClient", "ProtocolError", "ServerError"]
