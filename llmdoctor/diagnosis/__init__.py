"""Differential diagnosis: hypotheses from the first pass, follow-up tests ordered within a budget.

The ``diagnosis`` probe (`planner.diagnose_followups`) returns a `Diagnosis`; check LD720
turns each confirmed cause into a finding, and the renderers show each cause's chain
(symptom → hypotheses → test ordered → result → conclusion) and the refuted hypotheses.
"""

from __future__ import annotations

from llmdoctor.diagnosis.model import ChainLink, Diagnosis, HypothesisState, Observation, Step, Update

__all__ = ["ChainLink", "Diagnosis", "HypothesisState", "Observation", "Step", "Update"]
