"""The sandbox's credit balance: charges, refunds and the balance a test sets."""

from __future__ import annotations

from ._simulation import INSUFFICIENT_CREDITS, SandboxError

__all__ = ["Wallet"]


class Wallet:
    """The API credit balance of the sandbox's one user.

    Args:
        credits: Starting balance (total and available).
    """

    __slots__ = ("available", "total")

    def __init__(self, credits: float) -> None:
        self.total = float(credits)
        self.available = float(credits)

    def can_pay(self, amount: float) -> bool:
        """Whether ``amount`` credits are available."""
        return amount <= self.available

    def charge(self, amount: float) -> None:
        """Take ``amount`` credits.

        Raises:
            SandboxError: 409 / 300111 when the balance is too low (nothing is taken).
        """
        if amount > self.available:
            raise SandboxError(409, 300111, INSUFFICIENT_CREDITS)
        self.available = round(self.available - amount, 2)

    def refund(self, amount: float) -> None:
        """Give ``amount`` credits back."""
        self.available = round(self.available + amount, 2)

    def set(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance (``total`` is raised to ``available`` if lower)."""
        if available is not None:
            self.available = float(available)
        if total is not None:
            self.total = float(total)
        self.total = max(self.total, self.available)
