"""Errors of the pool that a user or operator can act on."""

from xirang_core.errors import XirangError


class PoolError(XirangError):
    """A pool request is invalid: unknown project or job, impossible size, bad cluster file.

    ``status`` is the HTTP status the REST service answers with.
    """

    status = 400

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
