"""Export a task table for a crowd platform: Label Studio, Amazon MTurk, or an external survey.

Every platform gets the same blind view of each task, in display order: the
prompt, then the first and the second response (:data:`~services.crowd.tasks.SHOWN_COLUMNS`),
plus ``batch_id`` and ``task_id`` so the answers can be mapped back through the
batch's task table (``tasks.csv``, written beside the platform files and not to
be uploaded: it names the systems).

=============== ==================================================================
platform        files
=============== ==================================================================
``labelstudio`` ``labelstudio_tasks.json`` (``[{"data": {...}}]``) and
                ``labelstudio_config.xml`` (``Text`` x 3 + ``Choices name="preference"``)
``mturk``       ``mturk_input.csv`` (batch input: one HIT per task) and
                ``mturk_template.html`` (crowd-html-elements ``crowd-classifier``,
                answer ``Answer.preference.label``), ``mturk_question.xml``
                (the same page as an ``HTMLQuestion`` for ``CreateHIT``)
``survey``      ``survey_tasks.csv`` / ``.jsonl`` and ``survey_results_template.csv``
                (``PROLIFIC_PID, STUDY_ID, SESSION_ID, task_id, choice``)
=============== ==================================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args

import polars as pl

from adaptive.core.csv_safe import write_csv
from services.crowd.tasks import SHOWN_COLUMNS

#: the crowd platforms, named once: the HTTP schema's choices and the CLI's come from here
Platform = Literal["labelstudio", "mturk", "survey"]
PLATFORMS: tuple[str, ...] = get_args(Platform)

#: the labels annotators choose from, in every platform's interface
CHOICE_LABELS: tuple[str, ...] = ("First", "Second", "Tie")

#: the answer field's name in Label Studio (``from_name``) and MTurk (``Answer.<name>.label``)
ANSWER_NAME = "preference"

#: the columns a survey's results file must have (Prolific passes the first three in the URL)
SURVEY_RESULT_COLUMNS: tuple[str, ...] = (
    "PROLIFIC_PID",
    "STUDY_ID",
    "SESSION_ID",
    "task_id",
    "choice",
    "timestamp",
)

#: the query string of a Prolific study URL that hands the survey its participant and session
PROLIFIC_URL_QUERY = (
    "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
)

QUESTION = "Which response answers the prompt better?"


def label_studio_config(question: str = QUESTION) -> str:
    """The labelling interface: the prompt, both responses in display order, one choice."""
    choices = "\n".join(f'    <Choice value="{c}"/>' for c in CHOICE_LABELS)
    return f"""<View>
  <Header value="{question}"/>
  <Text name="prompt" value="$prompt"/>
  <Header value="Response 1"/>
  <Text name="response_first" value="$response_first"/>
  <Header value="Response 2"/>
  <Text name="response_second" value="$response_second"/>
  <Choices name="{ANSWER_NAME}" toName="prompt" choice="single" showInline="true" required="true">
{choices}
  </Choices>
</View>
"""


def label_studio_tasks(tasks: pl.DataFrame) -> list[dict[str, Any]]:
    """Label Studio's task import format: ``[{"data": {...}}, ...]`` in display order."""
    return [{"data": row} for row in tasks.select(SHOWN_COLUMNS).iter_rows(named=True)]


def mturk_template(question: str = QUESTION) -> str:
    """The HIT page for the MTurk requester UI: ``${column}`` placeholders, a crowd-classifier."""
    categories = ", ".join(f"'{c}'" for c in CHOICE_LABELS)
    return f"""<script src="https://assets.crowd.aws/crowd-html-elements.js"></script>
<crowd-form answer-format="flatten-objects">
  <crowd-classifier name="{ANSWER_NAME}" categories="[{categories}]" header="{question}">
    <classification-target>
      <p><strong>Prompt</strong></p>
      <p>${{prompt}}</p>
      <p><strong>Response 1</strong></p>
      <p>${{response_first}}</p>
      <p><strong>Response 2</strong></p>
      <p>${{response_second}}</p>
    </classification-target>
    <short-instructions>
      Read the prompt and both responses. Choose the better response, or Tie when
      neither is better.
    </short-instructions>
    <full-instructions header="Instructions">
      Judge which response is the better reply to the prompt. The order of the
      responses is random. Choose Tie only when neither is better.
    </full-instructions>
  </crowd-classifier>
</crowd-form>
"""


def mturk_question(question: str = QUESTION) -> str:
    """The same page as an ``HTMLQuestion`` document (``CreateHIT`` with ``Question=``)."""
    return (
        '<HTMLQuestion xmlns="http://mechanicalturk.amazonaws.com/'
        'AWSMechanicalTurkDataSchemas/2011-11-11/HTMLQuestion.xsd">\n'
        "  <HTMLContent><![CDATA[\n<!DOCTYPE html>\n<html><head>"
        '<meta http-equiv="Content-Type" content="text/html; charset=UTF-8"/></head><body>\n'
        + mturk_template(question)
        + "</body></html>\n]]></HTMLContent>\n  <FrameHeight>0</FrameHeight>\n</HTMLQuestion>\n"
    )


def write_export(
    tasks: pl.DataFrame,
    platform: str,
    out_dir: str | Path,
    *,
    survey_format: str = "csv",
    question: str = QUESTION,
) -> list[Path]:
    """Write a batch's files for one platform, plus ``tasks.csv`` (the mapping back).

    Args:
        tasks: a task table (:func:`services.crowd.tasks.tasks_from_lease` or
            :func:`~services.crowd.tasks.read_tasks`).
        platform: ``labelstudio``, ``mturk`` or ``survey``.
        out_dir: folder to write into (created).
        survey_format: ``csv`` or ``jsonl`` for the survey's task file.
        question: the question shown to annotators.

    Returns:
        The paths written, ``tasks.csv`` first.
    """
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {PLATFORMS}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tasks.csv"]
    write_csv(tasks, paths[0])  # opened by people: formula-leading text escaped
    shown = tasks.select(SHOWN_COLUMNS)
    if platform == "labelstudio":
        paths += [out / "labelstudio_tasks.json", out / "labelstudio_config.xml"]
        paths[1].write_text(json.dumps(label_studio_tasks(tasks), indent=1, ensure_ascii=False))
        paths[2].write_text(label_studio_config(question))
    elif platform == "mturk":
        paths += [out / "mturk_input.csv", out / "mturk_template.html", out / "mturk_question.xml"]
        shown.write_csv(paths[1])
        paths[2].write_text(mturk_template(question))
        paths[3].write_text(mturk_question(question))
    else:
        if survey_format not in ("csv", "jsonl"):
            raise ValueError(f"survey format {survey_format!r}: expected csv or jsonl")
        paths += [out / f"survey_tasks.{survey_format}", out / "survey_results_template.csv"]
        if survey_format == "csv":
            shown.write_csv(paths[1])
        else:
            shown.write_ndjson(paths[1])
        paths[2].write_text(",".join(SURVEY_RESULT_COLUMNS) + "\n")
    return paths
