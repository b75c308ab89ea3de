"""Checks of the arguments every engine call shares (tenant, page), against the one table of
limits (`pml_server.domain.limits`) the API edge checks too."""

from __future__ import annotations

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS, TENANT_NAME, TENANT_NAME_RULE
from pml_server.domain.model import PageRequest


def check_tenant(tenant: str) -> None:
    if not TENANT_NAME.fullmatch(tenant):
        raise InvalidArgumentError(FieldViolation("tenant", f"must be {TENANT_NAME_RULE}"))


def check_page(page: PageRequest) -> None:
    bound = LIMITS.page_size.bound
    if not 1 <= page.page_size <= bound:
        raise InvalidArgumentError(FieldViolation("page_size", f"must be between 1 and {bound}"))
