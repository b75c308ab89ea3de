"""Plans: when no stored capability covers a request, compose one from 2 to 4 of them
(docs/ranking.md, Plans).

Pure decisions, no I/O: `split_request` cuts a request into its parts (clauses, in order);
the service retrieves a few candidates per part (`PartHit`s, each with its match on that part);
`compose` searches the assignments of parts to capabilities with a beam of stated width and
returns the plans that beat the best single capability under the same formula. Its cost is
bounded by `search_bound` whatever the store holds (docs/ranking.md, Plans, "Bound").
"""

from pml_server.ranking.plans._compose import (
    COVER_HITS,
    DEFAULT_PLAN_SIZE,
    MAX_PLAN_PARTS,
    MAX_PLAN_SIZE,
    MIN_PLAN_PARTS,
    MIN_PLAN_TOTAL_POOLED,
    PART_HITS,
    WHOLE_COVER,
    WHOLE_HITS,
    WHOLE_INTENTS,
    Composed,
    compose,
    search_bound,
)
from pml_server.ranking.plans._flow import (
    compatible,
    data_flow_order,
    identifier_inputs,
    link_parts,
    outputs,
)
from pml_server.ranking.plans._parts import (
    DETAIL_WEIGHT,
    INTRO_WEIGHT,
    MAX_REQUEST_PARTS,
    MIN_PART_WORDS,
    PART_CONTEXT,
    PartHit,
    pooled_part_vectors,
    split_request,
    split_request_spans,
    split_request_weighted,
)
from pml_server.ranking.plans._steps import (
    STEP_WEIGHT,
    named_steps,
    step_descriptions,
    step_match,
    tool_descriptions,
)
from pml_server.ranking.plans._words import (
    content_words,
    name_words,
    states_order,
    text_words,
    text_words_in_order,
    tool_words,
)

__all__ = [
    "COVER_HITS",
    "DEFAULT_PLAN_SIZE",
    "DETAIL_WEIGHT",
    "INTRO_WEIGHT",
    "MAX_PLAN_PARTS",
    "MAX_PLAN_SIZE",
    "MAX_REQUEST_PARTS",
    "MIN_PART_WORDS",
    "MIN_PLAN_PARTS",
    "MIN_PLAN_TOTAL_POOLED",
    "PART_CONTEXT",
    "PART_HITS",
    "STEP_WEIGHT",
    "WHOLE_COVER",
    "WHOLE_HITS",
    "WHOLE_INTENTS",
    "Composed",
    "PartHit",
    "compatible",
    "compose",
    "content_words",
    "data_flow_order",
    "identifier_inputs",
    "link_parts",
    "name_words",
    "named_steps",
    "outputs",
    "pooled_part_vectors",
    "search_bound",
    "split_request",
    "split_request_spans",
    "split_request_weighted",
    "states_order",
    "step_descriptions",
    "step_match",
    "text_words",
    "text_words_in_order",
    "tool_descriptions",
    "tool_words",
]
