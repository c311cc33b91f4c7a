"""Label Studio as a server: push a batch's tasks over its REST API, pull the annotations back.

The files of :mod:`services.crowd.export` go through a person's hands (paste the config,
upload the tasks, download the export). This module does the same through a running
Label Studio's API (token auth, ``Authorization: Token <token>``; checked against
Label Studio 1.23):

* :func:`push_tasks`: find or create the project (``GET/POST /api/projects/``) with the
  product's labelling config (:func:`~services.crowd.export.label_studio_config`), then
  import the batch's tasks (``POST /api/projects/{id}/import``) in the blind format of
  :func:`~services.crowd.export.label_studio_tasks`: ``data.batch_id`` is the lease id
  and ``data.task_id`` the task, so each answer maps back. A task already in the project
  (same ``batch_id`` and ``task_id``) is not imported twice.
* :func:`pull_export`: the project's annotated tasks (``GET /api/projects/{id}/export
  ?exportType=JSON``), the same JSON a person downloads with *Export -> JSON*;
  :func:`export_by_lease` groups them by lease, and :func:`pull_results` reads one batch's
  answers with the file path's reader (:func:`~services.crowd.results.read_parsed_results`).
  The service path posts each lease's group to ``POST /projects/{p}/leases/{lease}/results``
  (``evalset crowd pull --project``). Judgment ids are ``labelstudio:<annotation id>:<task_id>``
  either way, so a second pull stores nothing new.

This is the one module of :mod:`services.crowd` that talks HTTP. The token is sent, never
logged nor put in an error message.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import httpx
import polars as pl

from services.crowd.export import ANSWER_NAME, QUESTION, label_studio_config, label_studio_tasks
from services.crowd.results import CrowdImport, read_parsed_results

__all__ = [
    "TOKEN_ENV",
    "URL_ENV",
    "LabelStudio",
    "LabelStudioError",
    "PushResult",
    "connect",
    "export_by_lease",
    "ensure_project",
    "pull_export",
    "pull_results",
    "push_tasks",
]

#: the environment variables the command line reads when --ls-token / --ls-url are not given
TOKEN_ENV = "LABEL_STUDIO_TOKEN"
URL_ENV = "LABEL_STUDIO_URL"

TOKEN_HINT = (
    f"give a Label Studio API token with --ls-token or ${TOKEN_ENV} (a user's legacy API "
    "token, from its account settings; recent Label Studio versions need legacy tokens enabled "
    "for the organization, e.g. LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true when the server "
    "creates it)"
)


class LabelStudioError(Exception):
    """Label Studio could not be reached, refused the token, or lacks what was asked for."""


class LabelStudio:
    """A thin client of Label Studio's REST API: one ``httpx.Client``, token auth.

    Args:
        url: the server, e.g. ``http://localhost:8080``.
        token: a (legacy) API token, sent as ``Authorization: Token <token>``.
        timeout: seconds per request.
        transport: an ``httpx`` transport (tests pass an ``httpx.MockTransport``).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not token:
            raise LabelStudioError(f"no Label Studio token: {TOKEN_HINT}")
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Token {token}"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:  # never the token
        return f"LabelStudio({self.url!r})"

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, *, missing: str = "", **kwargs: Any) -> Any:
        """One API call's JSON; :class:`LabelStudioError` with a readable reason otherwise.

        ``missing`` is the message of a 404 (e.g. which project was not found).
        """
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise LabelStudioError(
                f"cannot reach Label Studio at {self.url} ({type(exc).__name__}: {exc}); "
                "is the server running (label-studio start) and the URL right?"
            ) from exc
        code = response.status_code
        if code == 401:
            raise LabelStudioError(
                f"Label Studio at {self.url} refused the token (401 {_detail(response)}): "
                + TOKEN_HINT
            )
        if code == 403:
            raise LabelStudioError(
                f"Label Studio at {self.url} forbids {method} {path} to this token's user "
                f"(403 {_detail(response)})"
            )
        if code == 404:
            raise LabelStudioError(missing or f"Label Studio at {self.url}: {path} not found (404)")
        if code >= 400:
            raise LabelStudioError(
                f"Label Studio at {self.url} answered {code} to {method} {path}: "
                f"{response.text[:300]}"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise LabelStudioError(
                f"Label Studio at {self.url} answered {method} {path} with something that is "
                f"not JSON ({response.headers.get('content-type', '?')}): is the URL Label "
                "Studio's?"
            ) from exc

    def projects(self) -> list[dict[str, Any]]:
        """Every project this token sees (all pages)."""
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            body = self.request("GET", "/api/projects/", params={"page": page, "page_size": 100})
            if isinstance(body, list):  # older servers answer a plain list
                return out + body
            out += body.get("results", [])
            if not body.get("next"):
                return out
            page += 1

    def project(self, project_id: int) -> dict[str, Any]:
        return dict(
            self.request(
                "GET",
                f"/api/projects/{project_id}/",
                missing=f"Label Studio at {self.url} has no project {project_id} "
                "(or this token's organization cannot see it)",
            )
        )

    def create_project(self, title: str, label_config: str) -> dict[str, Any]:
        body = {"title": title, "label_config": label_config, "maximum_annotations": 1}
        return dict(self.request("POST", "/api/projects/", json=body))

    def import_tasks(self, project_id: int, tasks: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return dict(
            self.request(
                "POST",
                f"/api/projects/{project_id}/import",
                json=list(tasks),
                missing=f"Label Studio at {self.url} has no project {project_id} to import into",
            )
        )

    def export(self, project_id: int, *, all_tasks: bool = False) -> list[dict[str, Any]]:
        """The project's JSON export: annotated tasks only, or every task (``all_tasks``)."""
        body = self.request(
            "GET",
            f"/api/projects/{project_id}/export",
            params={"exportType": "JSON", "download_all_tasks": str(all_tasks).lower()},
            missing=f"Label Studio at {self.url} has no project {project_id} to export",
        )
        if not isinstance(body, list):
            raise LabelStudioError(
                f"Label Studio's export of project {project_id} is not a list of tasks"
            )
        return body


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", ""))[:200]
    except (ValueError, AttributeError):
        return response.text[:200]


@contextmanager
def connect(url: str, token: str, **kwargs: Any) -> Iterator[LabelStudio]:
    """``with connect(url, token) as ls: ...``: a :class:`LabelStudio` closed at the end."""
    ls = LabelStudio(url, token, **kwargs)
    try:
        yield ls
    finally:
        ls.close()


class PushResult(NamedTuple):
    """What one push did."""

    project_id: int  #: the Label Studio project
    created: bool  #: the project was created by this push
    imported: int  #: tasks imported now
    already: int  #: tasks of the batch already in the project (a repeated push)


def _check_config(project: dict[str, Any]) -> None:
    config = str(project.get("label_config", ""))
    if f'name="{ANSWER_NAME}"' not in config or "<Choices" not in config:
        raise LabelStudioError(
            f"Label Studio project {project.get('id')} ({project.get('title')!r}) has no "
            f'<Choices name="{ANSWER_NAME}"> in its labelling config, so its answers could not '
            "be read back: push to a new project (another --ls-title) or paste "
            "labelstudio_config.xml (evalset crowd export) into its Labeling Interface"
        )


def ensure_project(
    ls: LabelStudio,
    *,
    project_id: int | None = None,
    title: str | None = None,
    question: str = QUESTION,
) -> tuple[dict[str, Any], bool]:
    """The project to push into: by id (must exist), else by title (created when absent).

    Returns:
        ``(project, created)``.

    Raises:
        LabelStudioError: no such project id, or a project whose labelling config has no
            ``Choices`` named ``preference``.
    """
    if project_id is not None:
        project = ls.project(project_id)
        _check_config(project)
        return project, False
    if not title:
        raise ValueError("give a Label Studio project id or a title")
    for project in ls.projects():
        if project.get("title") == title:
            project = ls.project(int(project["id"]))  # the list may leave the config out
            _check_config(project)
            return project, False
    return ls.create_project(title, label_studio_config(question)), True


def _key(task: dict[str, Any]) -> tuple[str, str]:
    data = task.get("data") or {}
    return str(data.get("batch_id", "")), str(data.get("task_id", ""))


def push_tasks(
    ls: LabelStudio,
    tasks: pl.DataFrame,
    *,
    project_id: int | None = None,
    title: str | None = None,
    question: str = QUESTION,
) -> PushResult:
    """Import a batch's tasks into a Label Studio project (created with the product's config).

    Args:
        ls: a client (:func:`connect`).
        tasks: the batch's task table (:func:`services.crowd.tasks.tasks_from_lease`, or
            :func:`~services.crowd.tasks.read_tasks` of ``tasks.csv``). Only the blind
            columns are sent (no system names).
        project_id: an existing project; else ``title`` is found or created.
        title: the project's title (default ``evalset <batch_id>``).
        question: the question of a new project's config.

    Returns:
        A :class:`PushResult`. Pushing the same batch again imports nothing.
    """
    if project_id is None and not title:
        title = f"evalset {tasks['batch_id'][0]}"
    project, created = ensure_project(ls, project_id=project_id, title=title, question=question)
    pid = int(project["id"])
    rows = label_studio_tasks(tasks)
    present = set() if created else {_key(t) for t in ls.export(pid, all_tasks=True)}
    new = [r for r in rows if _key(r) not in present]
    if new:
        ls.import_tasks(pid, new)
    return PushResult(pid, created, len(new), len(rows) - len(new))


def pull_export(ls: LabelStudio, project_id: int) -> list[dict[str, Any]]:
    """The project's annotated tasks, as Label Studio's *Export -> JSON* writes them."""
    return ls.export(project_id)


def export_by_lease(export: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """An export's tasks grouped by ``data.batch_id`` (the lease id), in export order.

    A task without a ``batch_id`` (not pushed by evalset) is grouped under ``""``.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for task in export:
        data = task.get("data") if isinstance(task, dict) else None
        batch = data.get("batch_id") if isinstance(data, dict) else None
        groups.setdefault("" if batch is None else str(batch), []).append(task)
    return groups


def pull_results(ls: LabelStudio, project_id: int, tasks: pl.DataFrame) -> CrowdImport:
    """One batch's answers in a Label Studio project, read as a results file would be.

    The export's tasks of this batch (``data.batch_id`` of ``tasks``) go through
    :func:`~services.crowd.results.read_parsed_results`: the same checks, the same
    judgment ids (``labelstudio:<annotation id>:<task_id>``), the same problems.
    """
    batches = set(tasks["batch_id"].unique().to_list())
    groups = export_by_lease(pull_export(ls, project_id))
    rows = [t for batch in sorted(batches) for t in groups.get(batch, [])]
    return read_parsed_results(
        rows, tasks, "labelstudio", source_name=f"Label Studio project {project_id}"
    )
