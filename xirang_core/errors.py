"""Errors a user can act on.

Anything raised as a :class:`XirangError` reaches the user as one line naming what is wrong and
what would be valid, with a non-zero exit, instead of a traceback.
"""


class XirangError(Exception):
    """Base of every user-facing error; ``exit_code`` is what the command line returns."""

    exit_code = 2
    #: how the command line introduces the message
    label = "xirang error"


class ConfigError(XirangError):
    """A config key, value or combination is invalid."""


class PluginError(XirangError):
    """A plugin cannot be loaded, conflicts with another, or lacks a dependency."""


class DataError(XirangError):
    """Input data is missing, corrupt, or does not match what the run pinned."""


#: what a worker raises when a peer died first: the symptom, not the cause
_PEER_LOST = ("gloo", "nccl", "connection closed by peer", "connection reset")


def peer_lost(message: str) -> bool:
    """Whether an error reads as a broken collective (a peer went away), not a cause."""
    return any(word in message.lower() for word in _PEER_LOST)
