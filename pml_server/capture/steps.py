"""A pattern's steps and data flow (docs/normalization.md, Steps): read from its stored
`original_code` by the Rust normalizer once, when the pattern is made, and stored with it under
`STEPS_RULES`; a pattern stored without them, or under other rules, has them stored again by
the open's pass (service/_older_builds.py `read_steps_again`), and until then read again when a
view is built for an answer. A pattern's code never changes, so the result is cached by
pattern id and hash.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from pml_server import _core
from pml_server.domain import json_form
from pml_server.domain.lru import Lru
from pml_server.domain.model import StepArgumentView, StepView

# Patterns whose steps are kept; a Suggest answer shows a handful, so this covers the hot set.
_CACHE_SIZE = 4096
_cache: Lru[tuple[str, str], tuple[StepView, ...]] = Lru(_CACHE_SIZE)
_lock = threading.Lock()

# How the core reads steps: raised with every change to what it reads from a code (the golden
# vectors of tests/vectors/steps.json change with it, and tests/capture/test_steps.py holds
# their digest to this number), so that steps stored under other rules are read again.
STEPS_RULES = 3


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


def stored_steps(code: str, language: str) -> str:
    """What a new pattern stores of its steps: `STEPS_RULES` and the steps of `code` (its
    stored code), as JSON; "" when the core refuses the code."""
    try:
        steps = _core.normalize(code, language).steps
    except (ValueError, _core.CoreError):
        return ""
    rows = [
        [
            s.tool,
            s.flow_known,
            list(s.depends_on),
            [[a.name, a.kind, list(a.parameters), list(a.sources)] for a in s.arguments],
        ]
        for s in steps
    ]
    return json_form.dumps([STEPS_RULES, rows]).decode()


def stored_under_today(stored: str) -> bool:
    """Whether `stored` (`stored_steps`) holds steps read under today's `STEPS_RULES`."""
    return bool(stored) and json_form.loads(stored.encode())[0] == STEPS_RULES


def _decoded(stored: str) -> tuple[StepView, ...] | None:
    """The steps `stored_steps` wrote, None when stored under other rules."""
    rules, rows = json_form.loads(stored.encode())
    if rules != STEPS_RULES:
        return None
    return tuple(
        StepView(
            tool=tool,
            arguments=tuple(
                StepArgumentView(
                    name=name,
                    kind=kind,
                    parameters=tuple(parameters),
                    sources=tuple((int(step), path) for step, path in sources),
                )
                for name, kind, parameters, sources in arguments
            ),
            depends_on=tuple(depends_on),
            flow_known=flow_known,
        )
        for tool, flow_known, depends_on, arguments in cast(list[Any], rows)
    )


def pattern_steps(
    pattern_id: str, code_hash: str, code: str, language: str, stored: str = ""
) -> tuple[StepView, ...]:
    """The steps of a stored pattern: those stored with it (`stored_steps`) under today's
    `STEPS_RULES`, else read from its stored code (cached). Never raises: code the core refuses
    (it was accepted at capture, so only after a limit was lowered) has none."""
    key = (pattern_id, code_hash)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            return cached
    steps = _decoded(stored) if stored else None
    if steps is None:
        try:
            steps = step_views(_core.normalize(code, language).steps)
        except (ValueError, _core.CoreError):
            steps = ()
    with _lock:
        _cache.put(key, steps)
    return steps
