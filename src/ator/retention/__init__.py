"""Retention and purge (layer: retention — a service beside webhooks, on the jobs kernel;
imports agent.extension, jobs, store, settings, errors, obs).

Per org: a policy of days per class of data (operator defaults and bounds), purged on the
org's schedule in bounded batches, audited; what will go when; the export of a thread.
"""

from ator.retention.extension import RetentionExtension
from ator.retention.policy import CLASSES, Policy
from ator.retention.purger import Purger, PurgeReport
from ator.retention.service import KIND, SCHEDULE, Retention, RetentionReport

__all__ = ["CLASSES", "KIND", "SCHEDULE", "Policy", "PurgeReport", "Purger", "Retention",
           "RetentionExtension", "RetentionReport"]
