"""Checks of the arguments every engine call shares (tenant, page)."""

from __future__ import annotations

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.model import PageRequest

MAX_PAGE_SIZE = 1000


def check_tenant(tenant: str) -> None:
    if not tenant or len(tenant.encode("utf-8")) > 256:
        raise InvalidArgumentError(FieldViolation("tenant", "must be 1 to 256 bytes"))


def check_page(page: PageRequest) -> None:
    if not 1 <= page.page_size <= MAX_PAGE_SIZE:
        raise InvalidArgumentError(
            FieldViolation("page_size", f"must be between 1 and {MAX_PAGE_SIZE}")
        )
