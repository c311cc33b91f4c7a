"""With an admin token set, only it opens the gold routes: their answers are the checks',
and the project's token is the one an annotation tool holds (docs/gold.md). Real HTTP."""

from __future__ import annotations

import httpx

from services.settings import Settings
from tests.factories import ThreadServer


def test_with_an_admin_token_only_it_opens_the_gold_routes(tmp_path):
    """The project's token is the one an annotation tool holds: it must not list answers."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'admin.db'}", streaming=False, admin_token="adm-1"
    )
    admin = {"Authorization": "Bearer adm-1"}
    with ThreadServer(settings) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        r = client.post("/projects", json={"project_id": "pa"}, headers=admin)
        assert r.status_code == 201, r.text
        project = {"Authorization": f"Bearer {r.json()['token']}"}
        r = client.post(
            "/projects/pa/systems",
            json={"systems": [{"system_id": s} for s in ("s0", "s1")]},
            headers=project,
        )
        assert r.status_code == 200, r.text
        prompts = [{"prompt_id": "q6", "text": "t", "responses": {"s0": "yes", "s1": "no"}}]
        assert client.post("/projects/pa/prompts", json={"prompts": prompts}, headers=project)
        cells = {"cells": [{"item_id": "q6", "system_a": "s0", "system_b": "s1", "answer": "a"}]}
        for method, path, body in (
            ("POST", "/projects/pa/gold", cells),
            ("GET", "/projects/pa/gold", None),
            ("GET", "/projects/pa/gold/scores", None),
        ):
            r = client.request(method, path, json=body, headers=project)
            assert r.status_code == 403 and "admin token" in r.text, (path, r.text)
            r = client.request(method, path, json=body)
            assert r.status_code == 401, (path, r.text)
            r = client.request(method, path, json=body, headers=admin)
            assert r.status_code == 200, (path, r.text)
        assert client.get("/projects/pa/gold", headers=admin).json()["cells"][0]["item_id"] == "q6"
        assert client.get("/projects/nowhere/gold", headers=admin).status_code == 404
