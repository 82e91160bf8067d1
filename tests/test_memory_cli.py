"""`redfleet memory …` and `submit --tenant/--user` as a user types them."""

from __future__ import annotations

import json

from shared_state import State

from .test_cli import assert_one_line_error, run


def test_add_list_search_history_show_and_forget(state: State, redis_url: str) -> None:
    first = json.loads(
        run("memory", "add", "deploys go to eu-west-1", "--key", "deploy.region", "--json",
            url=redis_url).stdout
    )  # fmt: skip
    assert first["provenance"]["source_kind"] == "user"
    assert first["provenance"]["actor"].startswith("cli:")
    second = run("memory", "add", "deploys go to us-east-2", "--key", "deploy.region",
                 url=redis_url)  # fmt: skip
    assert second.returncode == 0 and "current" in second.stdout

    listed = json.loads(run("memory", "list", "--json", url=redis_url).stdout)
    assert {i["text"]: i["status"] for i in listed} == {
        "deploys go to eu-west-1": "superseded",
        "deploys go to us-east-2": "current",
    }
    found = json.loads(
        run("memory", "search", "where do deploys go", "--json", url=redis_url).stdout
    )
    assert [h["text"] for h in found] == ["deploys go to us-east-2"]  # only the current version
    chain = json.loads(run("memory", "history", "deploy.region", "--json", url=redis_url).stdout)
    assert [h["version"] for h in chain] == [1, 2]
    shown = run("memory", "show", first["id"], url=redis_url)
    assert "source: user memory add (authority 3)" in shown.stdout

    dry = run("memory", "forget", first["id"], "--dry-run", url=redis_url)
    assert f"would be removed {first['id']}" in dry.stdout and "nothing changed" in dry.stdout
    assert run("memory", "show", first["id"], url=redis_url).returncode == 0  # still there
    forgot = run("memory", "forget", first["id"], url=redis_url)
    assert f"removed {first['id']}" in forgot.stdout
    assert_one_line_error(run("memory", "show", first["id"], url=redis_url), "no memory item")


def test_a_long_text_is_cut_in_the_list_with_an_ellipsis(state: State, redis_url: str) -> None:
    long = "the deploy checklist: " + "check the canary, " * 10 + "then ship"
    run("memory", "add", long, "--key", "checklist", url=redis_url)
    listed = run("memory", "list", url=redis_url)
    shown = "".join(line.strip(" │┃") for line in listed.stdout.splitlines())
    assert "…" in listed.stdout and long not in shown
    assert json.loads(run("memory", "list", "--json", url=redis_url).stdout)[0]["text"] == long


def test_tenants_are_apart_at_the_cli(state: State, redis_url: str) -> None:
    run("memory", "add", "acme uses postgres", "--tenant", "acme", url=redis_url)
    other = json.loads(run("memory", "list", "--tenant", "globex", "--json", url=redis_url).stdout)
    assert other == []
    found = run("memory", "search", "postgres", "--tenant", "globex", "--json", url=redis_url)
    assert json.loads(found.stdout) == []


def test_bad_input_is_one_line_naming_what_was_wrong(state: State, redis_url: str) -> None:
    assert_one_line_error(run("memory", "list", "--tenant", "a b", url=redis_url), "tenant")
    assert_one_line_error(run("memory", "add", "x", "--scope", "job:j-1", url=redis_url), "--scope")
    assert_one_line_error(
        run("memory", "add", "the key is sk-abcdefghijklmnopqrst", url=redis_url), "secrets"
    )
    assert_one_line_error(run("memory", "forget", url=redis_url), "ITEM_ID")
    assert_one_line_error(run("memory", "list", "--scope", "nope", url=redis_url), "--scope")
    assert_one_line_error(run("memory", "search", " ", url=redis_url), "QUERY")
    empty_id = run("memory", "list", "--scope", "user:", url=redis_url)
    assert_one_line_error(empty_id, "--scope: scope user: id '' is not a valid name")
    assert "pydantic" not in empty_id.stderr and "validation error" not in empty_id.stderr
    # memory add names the scopes it writes, not every scope there is.
    for scope in ("nope", "user:", "job:j-1:"):
        refused = run("memory", "add", "x", "--scope", scope, url=redis_url)
        assert_one_line_error(refused, f"memory add writes app: or user:<id>:, not {scope!r}")
    # The trailing colon may be left out, as everywhere a scope is read.
    assert run("memory", "add", "ours", "--scope", "app", url=redis_url).returncode == 0
    assert_one_line_error(run("submit", "a goal", "--tenant", "x{y}", url=redis_url), "tenant")


def test_submit_records_the_tenant_and_user_on_the_job(state: State, redis_url: str) -> None:
    out = run("submit", "a goal", "--scenario", "noop", "--tenant", "acme", "--user", "bob",
              "--json", url=redis_url)  # fmt: skip
    job = state.jobs.get(json.loads(out.stdout)["job_id"])
    assert (job.tenant, job.user) == ("acme", "bob")


def test_submit_memory_file_stores_the_tenants_project_memory(
    state: State, redis_url: str, tmp_path
) -> None:
    from shared_state.memory import MemoryContext
    from shared_state.memory.files import PROJECT_MEMORY, MemoryFiles

    doc = tmp_path / "AGENTS.md"
    doc.write_text("# Project rules\n- tests with pytest\n")
    out = run("submit", "g", "--scenario", "noop", "--tenant", "acme", "--memory-file", str(doc),
              url=redis_url)  # fmt: skip
    assert out.returncode == 0, out.stderr
    ctx = MemoryContext(tenant="acme", actor="t")
    assert MemoryFiles(state.client).read(ctx, PROJECT_MEMORY)[0] == doc.read_text()
    missing = run("submit", "g", "--memory-file", str(tmp_path / "nope.md"), url=redis_url)
    assert_one_line_error(missing, "--memory-file: cannot read", "nope.md", "No such file")
    big = tmp_path / "big.md"
    big.write_text("x" * 100_001)
    assert_one_line_error(run("submit", "g", "--memory-file", str(big), url=redis_url), "over")


def test_memory_show_file_reads_the_project_memory_a_job_was_given(
    state: State, redis_url: str, tmp_path
) -> None:
    doc = tmp_path / "AGENTS.md"
    doc.write_text("# Project rules\n- tests with pytest\n- \x1b[2Jno escapes\n")
    run("submit", "g", "--scenario", "noop", "--tenant", "acme", "--memory-file", str(doc),
        url=redis_url)  # fmt: skip
    path = "/memories/project/AGENTS.md"
    shown = run("memory", "show", "--file", path, "--tenant", "acme", url=redis_url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "# Project rules\n- tests with pytest\n- no escapes\n"
    exact = json.loads(
        run("memory", "show", "--file", path, "--tenant", "acme", "--json", url=redis_url).stdout
    )
    assert exact["content"] == doc.read_text() and len(exact["sha256"]) == 64
    listing = ("memory", "show", "--file", "/memories/project", "--tenant", "acme", "--json")
    folder = json.loads(run(*listing, url=redis_url).stdout)
    assert folder["files"] == [{"path": path, "bytes": len(doc.read_bytes())}]
    other = run("memory", "show", "--file", path, "--tenant", "globex", url=redis_url)
    assert_one_line_error(other, "AGENTS.md")
    assert_one_line_error(run("memory", "show", url=redis_url), "ITEM_ID or --file")


def test_a_value_a_temporary_one_shadows_is_listed_as_such(state: State, redis_url: str) -> None:
    run("memory", "add", "the editor is vim", "--key", "editor", url=redis_url)
    run("memory", "add", "the editor is nano this week", "--key", "editor", "--valid-for",
        "3600", url=redis_url)  # fmt: skip
    listed = json.loads(run("memory", "list", "--json", url=redis_url).stdout)
    temporary = next(i for i in listed if i["text"] == "the editor is nano this week")
    lasting = next(i for i in listed if i["text"] == "the editor is vim")
    assert lasting["status"] == temporary["status"] == "current"
    assert lasting["shadowed_until"] == temporary["valid_until"] > 0
    table = run("memory", "list", url=redis_url).stdout
    assert "shadowed for 59m" in table
    found = json.loads(run("memory", "search", "which editor", "--json", url=redis_url).stdout)
    assert [h["text"] for h in found] == ["the editor is nano this week"]
