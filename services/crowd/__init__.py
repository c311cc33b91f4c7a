"""The crowd round trip: a leased batch out to a crowd platform, the answers back in.

* :mod:`services.crowd.tasks`: the batch's task table (display order, texts, the
  mapping of first/second to a/b);
* :mod:`services.crowd.export`: files for Label Studio, Amazon MTurk and external
  (Prolific-style) surveys;
* :mod:`services.crowd.results`: the platforms' result files back as judgments;
* :mod:`services.crowd.labelstudio_api`: the same with a running Label Studio, over its
  REST API (push a batch's tasks, pull the annotations; imported on its own).

Pure functions on frames and files: no database, and no web except the Label Studio
client (``services/api/routes/crowd.py`` and ``evalset crowd`` are the edges). See docs/crowd.md.
"""

from services.crowd.export import PLATFORMS, write_export
from services.crowd.results import CrowdImport, read_parsed_results, read_results
from services.crowd.tasks import TASK_COLUMNS, normalize_tasks, read_tasks, tasks_from_lease

__all__ = [
    "PLATFORMS",
    "TASK_COLUMNS",
    "CrowdImport",
    "normalize_tasks",
    "read_parsed_results",
    "read_results",
    "read_tasks",
    "tasks_from_lease",
    "write_export",
]
