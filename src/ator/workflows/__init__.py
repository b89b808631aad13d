"""Workflows: JSON recipes (`ator.workflow/v1`) run exactly once by a PostgreSQL reconciler
on the jobs kernel (layer: workflows — a service extension beside subagents; imports
agent.extension, jobs, store, settings, errors, jsonata, jsonschema).

`WorkflowsExtension` plugs it into the engine; `Workflows` is the service the API calls
(`RunSchedules` for its schedules); `RECIPE_SCHEMA` is the published JSON Schema of a recipe.
"""

from ator.workflows.expressions import ExpressionError, Expressions
from ator.workflows.extension import WorkflowsExtension
from ator.workflows.live import RunEvents
from ator.workflows.recipe import FORMAT, RECIPE_SCHEMA, Limits, validate, validate_input
from ator.workflows.scheduled import RunSchedules
from ator.workflows.service import Workflows

__all__ = [
    "FORMAT",
    "RECIPE_SCHEMA",
    "ExpressionError",
    "Expressions",
    "Limits",
    "RunEvents",
    "RunSchedules",
    "Workflows",
    "WorkflowsExtension",
    "validate",
    "validate_input",
]
