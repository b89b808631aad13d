"""Analyses: recurring model work defined as data, cached, validated, billed and backed by
a rule (layer: analyses — an extension of the kernel, a service beside workflows; imports
agent.extension, jobs, store, webhooks.delivery, errors, jsonenc, obs).

A kind (`kind.py`) says how to build its input, what changes the answer, how to prompt,
what the output must be (`validate.py`), the rule to fall back on and what to do with the
result; `runner.py` runs one on the jobs kernel; `service.py` is the `Analyses` service;
`evals.py` runs each kind's eval set.
"""

from ator.analyses.builtin import builtin_kinds
from ator.analyses.evals import EvalReport, Evals, ci, run_cases
from ator.analyses.extension import AnalysesExtension
from ator.analyses.kind import AnalysisKind, EvalCase, from_spec
from ator.analyses.runner import RUN, input_hash
from ator.analyses.service import FALLBACK_FLAG, Analyses
from ator.analyses.validate import Length, Reference, Verdict, Vocabulary, validate
from ator.store.analyses import Analysis

__all__ = ["FALLBACK_FLAG", "RUN", "Analyses", "AnalysesExtension", "Analysis",
           "AnalysisKind", "EvalCase", "EvalReport", "Evals", "Length", "Reference", "Verdict",
           "Vocabulary", "builtin_kinds", "ci", "from_spec", "input_hash", "run_cases",
           "validate"]
