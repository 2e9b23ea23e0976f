"""A route's settings: the models it serves, its upstream, window, policy, classification
rules and recall (proxy/config.py loads them under `routes:`, with the server's own).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.base import ChunkClass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UpstreamSettings(_Strict):
    model: str  # LiteLLM model string, e.g. openai/gpt-4o-mini, anthropic/claude-…
    api_base: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None  # read the key from this environment variable
    # Answer from LiteLLM's mock instead of a provider (no key, no network): the demo.
    mock_response: str | None = None
    timeout: float = Field(600.0, gt=0)
    # auto: OpenAI-wire providers go straight over aiohttp, the rest through litellm.acompletion
    transport: Literal["auto", "direct", "litellm"] = "auto"
    extra_headers: dict[str, str] = Field(default_factory=dict)
    # through LiteLLM: drop the OpenAI parameters the provider has no place for (seed,
    # store, logprobs… for Anthropic) instead of answering 400 unsupported_parameter
    drop_params: bool = False


class ClassRule(_Strict):
    """First matching rule wins; unset fields match anything."""

    role: str | None = None
    tool: str | None = None  # function name of the call a tool result answers
    pattern: str | None = None  # regular expression searched in the text
    position: Literal["first", "last"] | None = None
    klass: ChunkClass = Field(alias="class")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        """A pattern that is no regular expression stops start-up naming the key, not with a
        traceback from the first chunker built."""
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class ClassificationSettings(_Strict):
    rules: list[ClassRule] = Field(default_factory=list)
    bulky_tokens: int = Field(4000, ge=1)  # a tool result this big and log-like is EPHEMERAL


class RecallSettings(_Strict):
    """Recall reads the session's lexical index (proxy/recall.py): a passage of an evicted
    chunk comes back when its strength (BM25 over the query's ideal, in [0, 1]) reaches
    `min_relevance` and its score is within `min_relative` of the session's best match
    (`question_min_relevance` and `question_min_relative` on a user's question).
    `budget_fraction` of the room is the most a recall may take (`question_budget_fraction`
    on a user's question), and only on turns that recall (evicting to make room if it
    must); on a turn where the user asks, it may also take the room the request leaves
    free. The defaults are calibrated in docs/design-notes.md."""

    enabled: bool = True
    budget_fraction: float = Field(0.10, ge=0, le=0.5)
    # ...and when the user asks (the larger of the two): the answer is often a few
    # passages down its matches; `enabled: false` turns recall off
    question_budget_fraction: float = Field(0.20, ge=0, le=0.5)
    # ...and up to this when what the request evicts is at least `far_history` times the
    # room: the more of a history is out of sight, the more rivals the answer has among
    # its question's matches (on the written-apart sets it ranked 20th-50th more often
    # than in the top 12), so the net widens; histories within that (tau-bench at 3,000
    # tokens: under 1.7 times at the 90th percentile) keep the room for what they hold
    question_budget_far: float = Field(0.40, ge=0, le=0.5)
    far_history: float = Field(2.0, ge=0)
    # ...but never less than this many tokens (up to a quarter of the room): a tenth of a
    # small window (270 tokens of a 3,000-token one) holds one passage of JSON, not two
    min_budget_tokens: int = Field(400, ge=0)
    min_relevance: float = Field(0.25, ge=0, le=1)
    min_relative: float = Field(0.5, ge=0, le=1)
    # a user's question (proxy/step.py `asking`) is about what the conversation has
    # seen: its best evicted matches come back at this lower bar
    question_min_relevance: float = Field(0.10, ge=0, le=1)
    # ...and its matches within this share of its best (not half): its answer's passage
    # often shares fewer of its words than the passage that matches them best (a row
    # under the header that names them). 0.3-0.4 kept 1,074-1,079 of 1,193 facts on the
    # written-apart sets back to back against 1,061 at 0.5 (docs/design-notes.md)
    question_min_relative: float = Field(0.35, ge=0, le=1)
    top_k: int = Field(8, ge=1)
    # a question's reach: its answer often ranks below its eighth match (a value none of
    # its words names, in a table or log its words do match); the budget above binds
    # first (12 → 30 with a fifth of the room: 3 more facts back to back and 4 more cold
    # on fourteen black-box sets, docs/design-notes.md)
    question_top_k: int = Field(30, ge=1)
    # Vectors refine where ready: a passage whose cosine to the step's words reaches this
    # is recalled too (and counts in RWOE's sim); the step's vector is waited for at most
    # vector_wait_ms. 0.5 sits above the noise MiniLM gives unrelated passages (<= 0.46 on
    # the generated sessions, docs/design-notes.md). 0 by default: MiniLM on two cores
    # takes 10-20 ms for a query, so a short wait never got it and a long one costs every
    # question that much; set it for a faster embedder (a GPU, an API within reach).
    min_similarity: float = Field(0.50, ge=-1, le=1)
    vector_wait_ms: int = Field(0, ge=0, le=1000)
    # A question waits for its own vector at most this long, and only where that can pay
    # off: the embedder idle and this session's passages embedded (a paced loop; back to
    # back the embedder lags and no question waits), and its own words not matching one
    # or two evicted chunks alone at min_relevance (then they found it). 0 turns it off.
    # Then its nearest evicted passages by vector (the best 3, the nearest first) come
    # back from this cosine, as its best lexical matches do from question_min_relevance
    # (docs/design-notes.md).
    question_vector_wait_ms: int = Field(60, ge=0, le=1000)
    question_min_similarity: float = Field(0.25, ge=-1, le=1)
    # a question's words also match their related words (store/related.py: "big" finds
    # "large", "growth" finds "grew") whose cosine reaches this; 1 turns it off
    related_words: float = Field(0.35, ge=0.35, le=1)
    cross_session: bool = False
    timeout_ms: int = Field(1000, ge=1)

    def budget(self, room: int, asks: bool = False, out: int = 0) -> int:
        """The most a recall may take of `room` tokens (`asks`: on a user's question,
        `out`: the tokens of the history this request evicts)."""
        fraction = (max(self.budget_fraction, self.question_budget_fraction) if asks
                    else self.budget_fraction)
        if asks and fraction > 0 and out >= self.far_history * room:
            fraction = max(fraction, self.question_budget_far)
        if fraction <= 0:
            return 0
        return max(int(room * fraction), min(self.min_budget_tokens, room // 4))


class RouteSettings(_Strict):
    name: str
    model: str = "*"  # glob on the request's `model`
    upstream: UpstreamSettings
    context_window: int | None = Field(None, ge=64)
    max_output_tokens: int = Field(1024, ge=1)
    policy: str = "rwoe"
    policy_params: dict[str, Any] = Field(default_factory=dict)
    watermark: float = Field(0.85, gt=0, le=1)  # evict down to this share of the budget
    # of the window, kept free for a provider counting differently; unset: 1 % where
    # tiktoken has the model's own tokenizer (proxy/tokens.py counts over), else 5 %
    safety_margin: float | None = Field(None, ge=0, lt=0.5)
    classification: ClassificationSettings = Field(default_factory=ClassificationSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)

    def matches(self, model: str) -> bool:
        """The request's model names this route, or matches its glob."""
        return model == self.name or fnmatch.fnmatchcase(model, self.model)
