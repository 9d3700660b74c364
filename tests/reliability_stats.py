"""Counters behind the reliability suite's one-line summary."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReliabilityStats:
    inputs_tried: int = 0
    faults_injected: int = 0
    items_lost: int = 0

    def summary(self) -> str:
        return (
            f"reliability: {self.inputs_tried} inputs tried, "
            f"{self.faults_injected} faults injected, {self.items_lost} items lost"
        )


STATS = ReliabilityStats()
