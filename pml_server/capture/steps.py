"""A pattern's steps and data flow (docs/normalization.md, Steps), derived on read.

Steps are not stored: they are read again from the pattern's stored `original_code` by the
Rust normalizer when a view is built for an answer, so every existing store shows them with no
migration. A pattern's code never changes, so the result is cached by pattern id and hash.
"""

from __future__ import annotations

import threading

from pml_server import _core
from pml_server.domain.lru import Lru
from pml_server.domain.model import StepArgumentView, StepView

# Patterns whose steps are kept; a Suggest answer shows a handful, so this covers the hot set.
_CACHE_SIZE = 4096
_cache: Lru[tuple[str, str], tuple[StepView, ...]] = Lru(_CACHE_SIZE)
_lock = threading.Lock()


def step_views(steps: list[_core.Step]) -> tuple[StepView, ...]:
    """The core's steps as domain views."""
    return tuple(
        StepView(
            tool=s.tool,
            arguments=tuple(
                StepArgumentView(
                    name=a.name,
                    kind=a.kind,
                    parameters=tuple(a.parameters),
                    sources=tuple((int(step), path) for step, path in a.sources),
                )
                for a in s.arguments
            ),
            depends_on=tuple(s.depends_on),
            flow_known=s.flow_known,
        )
        for s in steps
    )


def pattern_steps(
    pattern_id: str, code_hash: str, code: str, language: str
) -> tuple[StepView, ...]:
    """The steps of a stored pattern, read from its stored code (cached). Never raises: code
    the core refuses (it was accepted at capture, so only after a limit was lowered) has none."""
    key = (pattern_id, code_hash)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            return cached
    try:
        steps = step_views(_core.normalize(code, language).steps)
    except (ValueError, _core.CoreError):
        steps = ()
    with _lock:
        _cache.put(key, steps)
    return steps
