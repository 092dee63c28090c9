"""LICENSE, CITATION.cff, CONTRIBUTING.md, the CI workflow and the pre-commit configuration."""

from __future__ import annotations

from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_license_is_mit_as_the_metadata_says_and_excludes_the_guides_excerpts():
    text = (REPO / "LICENSE").read_text()
    assert PROJECT["license"] == {"text": "MIT"} and text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text
    assert "NOT covered by" in text and "guide's own terms" in text


def test_citation_file_is_valid_cff_with_the_package_version():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert citation["version"] == PROJECT["version"] and citation["license"] == "MIT"
    assert citation["title"] and citation["authors"] and citation["message"]


def test_contributing_says_how_to_change_a_notebook_and_its_translation():
    text = (REPO / "CONTRIBUTING.md").read_text()
    for needle in ("make notebooks", "make test", "Output policy", ".po", "fuzzy",
                   "pre-commit install"):
        assert needle in text, needle
    assert text.index("**Edit**") < text.index("make notebooks") < text.index("**Test**")


def test_ci_workflow_runs_ci_run_on_push_and_pull_request():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    assert any(".ci/run" in step.get("run", "") for step in steps)
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.index("make system-deps") < ci.index("make test")


def test_pre_commit_config_has_the_hooks_the_project_needs():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff", "jupytext-sync", "check-added-large-files", "check-merge-conflict"} <= set(hooks)
    assert set(hooks["ruff"]["types_or"]) == {"python", "jupyter"}
    # Local hooks only, so that `pre-commit run` needs no network.
    assert all(repo["repo"] == "local" for repo in config["repos"])
