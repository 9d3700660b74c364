"""What the plugin's own work costs: the shared usage ledger and the ``[budget]`` caps."""

from .budget import Admission, BackgroundBudget
from .ledger import BLOCKS, FEATURES, UsageLedger
from .report import usage_json, usage_report
from .spend import Spend, estimate_tokens, spend_of

__all__ = [
    "BLOCKS",
    "FEATURES",
    "Admission",
    "BackgroundBudget",
    "Spend",
    "UsageLedger",
    "estimate_tokens",
    "spend_of",
    "usage_json",
    "usage_report",
]
