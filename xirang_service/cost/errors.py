"""Errors of the cost subsystem."""

from xirang_core.errors import XirangError


class CostError(XirangError):
    """A price book, budget or report request is invalid."""


class BudgetExceeded(CostError):
    """A project or job reached its budget and its limit action refuses the request."""

    exit_code = 3
