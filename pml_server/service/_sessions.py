"""Sessions (docs/ranking.md, Sessions): what a successful capture with a session id teaches,
and what a Suggest with a context reads.

Capture (`follow`, under the capture's pattern lock, then the session's lock, then the
transition's): the session's last step is read; if it is kept and not idle longer than
`session_idle_seconds`, the transition previous capability -> this capability is counted (a
read-modify-write under the transition's lock: exact, on a shared store across replicas too,
since the locks are the writing transaction's advisory locks); the session's last step becomes
this one. Both writes join the capture's own atomic batch, so a capture and what it teaches
are written together or not at all, and a replayed request id teaches nothing twice.

A tenant keeps at most `max_sessions` sessions: every `max_sessions / 8` sessions a process
starts for a tenant, and at least every `SWEEP_EVERY_AT_MOST` whatever the bound (`sweep_every`),
it sweeps them (`sweep`): idle ones are dropped, then the least recently used beyond the bound,
`SWEEP_CHUNK` to a write that deletes a row only if still as scanned. Between sweeps a tenant
holds at most the bound plus what the processes sharing the store started since their last
sweep.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Mapping, Set

import numpy as np
from numpy.typing import NDArray

from pml_server.capture.rules import tool_signature
from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import (
    LIMITS,
    resource_id_problem,
    session_id_problem,
    tool_name_problem,
)
from pml_server.domain.model import SuggestContext
from pml_server.domain.vectors import Vector
from pml_server.ranking.transitions import transition_weights
from pml_server.search import TenantSearchIndex
from pml_server.service._state import EngineState
from pml_server.service._writes import Change

log = logging.getLogger(__name__)

# the likeliest next steps whose profiles a follow-up that moves on is read with
# (docs/ranking.md, Sessions, "Follow-up requests")
FOLLOWING_PROFILES = 8


def idle_ms(state: EngineState) -> int:
    return int(state.config.session_idle_seconds * 1000)


def follow(
    state: EngineState,
    tenant: str,
    session_id: str,
    capability_id: str,
    change: Change,
    held: contextlib.ExitStack,
    now: int,
) -> None:
    """Count the transition from the session's previous step to `capability_id` (if it has
    one, not idle) and make this the session's last step: ops added to `change`."""
    repo = state.repo
    # named by the row's key, as `sweep` names it (the id itself is never written anywhere)
    held.enter_context(
        state.locks.session.lock_for(tenant, repo.sessions.key(tenant, session_id).hex())
    )
    previous = repo.sessions.session_step(tenant, session_id)
    if previous is not None and now - previous[1] <= idle_ms(state):
        before = previous[0]
        held.enter_context(state.locks.transition.lock_for(tenant, before, capability_id))
        count = (repo.sessions.transition(tenant, before, capability_id) or (0, 0))[0]
        change.ops.append(
            repo.sessions.put_transition(tenant, before, capability_id, count + 1, now)
        )
    change.ops.append(repo.sessions.put_session_step(tenant, session_id, capability_id, now))
    if previous is None:
        state.new_sessions.started(tenant)


# New sessions between two sweeps at most, whatever `max_sessions`: the default bound's eighth
# (docs/ranking.md, Sessions). A bound of a billion swept every 125 million new sessions, so idle
# sessions were never deleted from the store.
SWEEP_EVERY_AT_MOST = LIMITS.sessions.bound // 8


def sweep_every(bound: int) -> int:
    """New sessions of a tenant between two sweeps, `bound` its `max_sessions`: an eighth of the
    bound, at least 1, at most `SWEEP_EVERY_AT_MOST` (docs/ranking.md, Sessions)."""
    return max(1, min(bound // 8, SWEEP_EVERY_AT_MOST))


def sweep_if_due(state: EngineState, tenant: str) -> None:
    """`sweep` once this process started `sweep_every` sessions of the tenant since the last
    one (called after a capture's locks are released, its write committed). A sweep that
    fails is logged, never the capture's error: the capture is stored, and the next sweep
    drops what this one left."""
    bound = state.rules.limits.fields.sessions.bound
    if state.new_sessions.sweep_due(tenant, sweep_every(bound)):
        try:
            sweep(state, tenant)
        except Exception as error:  # housekeeping: the committed capture stands
            log.warning("session sweep of tenant %r failed: %s", tenant, error)


# Session rows one write of a sweep deletes: a capture that sweeps a tenant at its bound pays a
# few writes, not one a session (docs/ranking.md, Sessions).
SWEEP_CHUNK = 1024


def sweep(state: EngineState, tenant: str) -> int:
    """Drop the tenant's idle sessions, then the least recently used beyond `max_sessions`;
    how many were dropped. `SWEEP_CHUNK` rows to a write, each only if no capture rewrote it
    since the scan (the store compares it in the write: that capture's step is kept, so the
    next one follows it)."""
    repo = state.repo
    now = state.clock()
    rows = sorted(repo.sessions.session_rows(tenant), key=lambda row: row[1], reverse=True)
    bound = state.rules.limits.fields.sessions.bound
    limit = idle_ms(state)
    going = [row for n, row in enumerate(rows) if n >= bound or now - row[1] > limit]
    return sum(
        repo.sessions.delete_unchanged(going[start : start + SWEEP_CHUNK])
        for start in range(0, len(going), SWEEP_CHUNK)
    )


def check_context(context: SuggestContext) -> None:
    """InvalidArgumentError naming every bad field of a Suggest context."""
    bad = []
    if context.session_id and (problem := session_id_problem(context.session_id)) is not None:
        bad.append(FieldViolation("context.session_id", problem))
    # each the id of `patterns/{id}`, or that name
    patterns = tuple(v.removeprefix("patterns/") for v in context.previous_patterns)
    limit = LIMITS.previous_patterns
    if (too_many := limit.excess(patterns)) is not None:
        bad.append(FieldViolation(limit.field, too_many))
    elif problem := next(filter(None, map(resource_id_problem, patterns)), None):
        bad.append(FieldViolation(limit.field, problem))
    tools, limit, tool = context.previous_tools, LIMITS.previous_tools, LIMITS.tool
    if (too_many := limit.excess(tools)) is not None:
        bad.append(FieldViolation(limit.field, too_many))
    elif any(not t.strip() for t in tools):
        bad.append(FieldViolation(limit.field, "must not hold an empty name"))
    elif any(tool.excess(t) for t in tools):
        bad.append(FieldViolation(limit.field, f"names are at most {tool.bound} {tool.unit}"))
    elif problem := next(filter(None, map(tool_name_problem, tools)), None):
        bad.append(FieldViolation(limit.field, problem))
    if bad:
        raise InvalidArgumentError(bad)


def previous_step(
    state: EngineState, tenant: str, context: SuggestContext
) -> tuple[list[str], tuple[str, ...]]:
    """The agent's previous step: the capabilities standing for it and its tools in call
    order. The last of `previous_patterns` (its capability and tools), else `previous_tools`
    (the capabilities with exactly those tools, else those of its last tool alone), else the
    session's last step if kept and not idle (its capability's tools)."""
    repo = state.repo
    if context.previous_patterns:
        pattern_id = context.previous_patterns[-1].removeprefix("patterns/")
        record = repo.patterns.pattern(tenant, pattern_id)
        if record is None:
            return [], ()
        return [record.capability_id], tool_signature(record.tools_used)
    if context.previous_tools:
        # a tool named with or without its server's namespace, as `available_tools` are read
        # (docs/ranking.md, Context filters); a tenant with nothing indexed has no capability
        tools = tuple(context.previous_tools)
        index = state.indexes.get(tenant)
        return ([] if index is None else index.ranks.step_capabilities(tools)), tools
    if context.session_id:
        step = repo.sessions.session_step(tenant, context.session_id)
        if step is not None and state.clock() - step[1] <= idle_ms(state):
            capability = repo.capabilities.capability(tenant, step[0])
            return [step[0]], () if capability is None else capability.tools
    return [], ()


class StepReading:
    """The agent's previous step for one Suggest, read from the store at most once however many
    rankings the request makes (alone, its plans' basis, its reading as a follow-up): the
    capabilities and tools standing for it (`previous_step`) and w(c) of what followed it
    (`context_weights`), each read when first asked for (docs/ranking.md, Sessions)."""

    def __init__(self, state: EngineState, tenant: str, context: SuggestContext | None) -> None:
        self._state = state
        self._tenant = tenant
        self._context = context

    @functools.cached_property
    def step(self) -> tuple[list[str], tuple[str, ...]]:
        """`previous_step` (the context checked); nothing without a context naming a step."""
        context = self._context
        if context is None or not context.names_a_step():
            return [], ()
        check_context(context)
        return previous_step(self._state, self._tenant, context)

    @functools.cached_property
    def weights(self) -> dict[str, float]:
        """`context_weights` at the time first asked."""
        return _weights(self._state, self._tenant, *self.step, self._state.clock())


def context_weights(
    state: EngineState, tenant: str, context: SuggestContext | None, now: int
) -> dict[str, float]:
    """w(c) of every capability that followed the agent's previous step (`ranking.transitions`):
    in its sessions' transitions and in the stored workflows that ran its last tool
    (docs/ranking.md, Sessions, "Workflows"); empty without a context or when nothing
    followed it."""
    return _weights(state, tenant, *StepReading(state, tenant, context).step, now)


def _weights(
    state: EngineState,
    tenant: str,
    capabilities: list[str],
    tools: tuple[str, ...],
    now: int,
) -> dict[str, float]:
    if not capabilities and not tools:
        return {}
    counts: list[tuple[str, int, int]] = []
    # at most `transitions_read` rows in all, however many capabilities stand for the step
    # (a tool that thousands run alone), each read counting one at least: its seek
    # (docs/ranking.md, Sessions, "The signal")
    budget = LIMITS.transitions_read.bound
    for capability_id in capabilities:
        if budget <= 0:
            break
        rows = state.repo.sessions.transitions_from(tenant, capability_id, budget)
        counts += rows
        budget -= max(1, len(rows))
    if counts:
        # a deleted capability is no next step: its rows stay, but w is relative to the most
        # likely step that can still follow (docs/ranking.md, Sessions, "The signal")
        kept = state.repo.capabilities.kept(tenant, sorted({c for c, _, _ in counts}))
        counts = [t for t in counts if t[0] in kept]
    index = state.indexes.get(tenant)
    taught = []
    if tools and index is not None:
        taught = index.ranks.followers(tools, LIMITS.workflows_read.bound)
    return transition_weights(counts, state.ranking, now, taught)


def following_profile(
    state: EngineState, tenant: str, weights: Mapping[str, float], index: TenantSearchIndex
) -> Vector | None:
    """Where the steps that usually follow the agent's previous step ask from, for a follow-up
    that moves on ("now book it": docs/ranking.md, Sessions, "Follow-up requests"): the mean
    of the tool profiles of the `FOLLOWING_PROFILES` capabilities most likely next (by their
    `weights`, w(c), ties by id), each weighed by its w(c), unit length; None when nothing
    followed the step or none of them has a profile."""
    likeliest = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:FOLLOWING_PROFILES]
    total: NDArray[np.float64] | None = None
    for capability_id, w in likeliest:
        capability = state.repo.capabilities.capability(tenant, capability_id)
        if capability is None or not w > 0.0:
            continue
        profile = index.ranks.step_profile(capability.tools, index.ann)
        if profile is None:
            continue
        weighed = w * profile.astype(np.float64)
        total = weighed if total is None else total + weighed
    norm = 0.0 if total is None else float(np.linalg.norm(total))
    if total is None or not norm > 0.0:
        return None
    return (total / norm).astype(np.float32)


def next_patterns(
    state: EngineState,
    tenant: str,
    weights: Mapping[str, float],
    allowed: Set[str] | None,
    explain: bool,
) -> list[str]:
    """The patterns "what usually comes next" ranks (docs/ranking.md, Sessions): those of the
    capabilities that follow the step, the most likely first, whole capabilities until
    `transitions_read` patterns that `allowed` permits (None: the context filters permit
    all), reading at most as many capabilities. Only permitted ones count, so a busy
    capability of tools not offered does not use the bound up; with `explain` also those of
    the first capabilities until the bound, permitted or not, so the answer lists what the
    filters removed (Context filters)."""
    bound = LIMITS.transitions_read.bound
    kept: list[str] = []
    shown: list[str] = []
    shows = explain and allowed is not None
    ranked = sorted(weights, key=lambda c: (-weights[c], c))
    for capability_id in ranked[:bound]:
        if len(kept) >= bound and (not shows or len(shown) >= bound):
            break
        capability = state.repo.capabilities.capability(tenant, capability_id)
        if capability is None:
            continue  # deleted since
        if len(kept) < bound:
            kept += [p for p in capability.pattern_ids if allowed is None or p in allowed]
        if shows and len(shown) < bound:
            shown += capability.pattern_ids
    return list(dict.fromkeys(kept + shown))
