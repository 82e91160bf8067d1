"""The context engine: per-slot budgets, clearing, working state, cache-ordered prompts."""

from .budgets import (
    DEFAULT_BUDGETS,
    ROLE_BUDGETS,
    ClearingPolicy,
    ContextBudgets,
    Overflow,
    Slot,
    SlotBudget,
    StateBudget,
)
from .compaction import fit as fit_state
from .engine import Block, ContextEngine, ContextRequest, Prompt, Retrieved, ToolSpec
from .identifiers import extract as extract_identifiers
from .messages import Message, ToolCall, turns
from .metrics import PRICES, CallLedger, CallRecord, Price, price_of
from .strategies import (
    ContextStrategy,
    Hybrid,
    Naive,
    Redfleet,
    RollingSummary,
    SlidingWindow,
)
from .summarizers import ExtractiveSummarizer, Summarized, Summarizer
from .tokens import ENCODING_FOR_MODEL, Tokenizer, tokenizer_for
from .working_state import Decision, Fact, WorkingState

__all__ = [
    "DEFAULT_BUDGETS",
    "ENCODING_FOR_MODEL",
    "PRICES",
    "ROLE_BUDGETS",
    "Block",
    "CallLedger",
    "CallRecord",
    "ClearingPolicy",
    "ContextBudgets",
    "ContextEngine",
    "ContextRequest",
    "ContextStrategy",
    "Decision",
    "ExtractiveSummarizer",
    "Fact",
    "Hybrid",
    "Message",
    "Naive",
    "Overflow",
    "Price",
    "Prompt",
    "Redfleet",
    "Retrieved",
    "RollingSummary",
    "SlidingWindow",
    "Slot",
    "SlotBudget",
    "StateBudget",
    "Summarized",
    "Summarizer",
    "Tokenizer",
    "ToolCall",
    "ToolSpec",
    "WorkingState",
    "extract_identifiers",
    "fit_state",
    "price_of",
    "tokenizer_for",
    "turns",
]
