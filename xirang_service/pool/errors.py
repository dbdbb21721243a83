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
        #: headers the answer carries (``Retry-After`` for a 503 or a 429)
        self.headers: dict[str, str] = {}


#: where a token comes from, for every message about a missing or refused one
TOKEN_HELP = (
    "set XIRANG_POOL_TOKEN (or --token) to your project's token, which `xirang pool quota "
    "PROJECT --guaranteed N` prints once when it creates the project (--rotate-token prints a "
    "new one); the operator's token is XIRANG_POOL_OPERATOR_TOKEN or the file "
    "<state>.operator-token that `xirang pool serve` writes at its first start and names"
)

#: how an operator's command gets the operator's token (a given token wins over the file)
OPERATOR_HELP = (
    "pass --token, or set XIRANG_POOL_OPERATOR_TOKEN (or XIRANG_POOL_TOKEN) to the content of "
    "<state>.operator-token that `xirang pool serve` names at its start"
)


class StoreUnavailable(PoolError):
    """The pool's store refused a write: the request changed nothing, in memory or in the store.

    The service answers 503 for that request alone (the HTTP layer maps ``status``) and keeps
    serving; the message names the store and the database's reason, never a password.
    ``headers`` tell the client when to try again (``Retry-After``, whole seconds).
    """

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message, 503)
        self.headers = {"Retry-After": str(max(1, retry_after))}


#: the header a standby replica names the leader's URL in (with its 503)
LEADER_HEADER = "X-Xirang-Leader"


class RateLimited(PoolError):
    """A project sent requests faster than its ``rate``: 429, with ``Retry-After`` (whole
    seconds) saying when its bucket holds a request again."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message, 429)
        self.headers = {"Retry-After": str(max(1, retry_after))}
