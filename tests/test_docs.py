"""Every code block in README.md and docs/ runs, so a pasted example works.

The convention (CONTRIBUTING.md, "Code blocks in the documentation") is:

* a ```python block runs as a script in a sandbox folder and must exit 0;
* a ```toml block must be a policy the parser accepts;
* in a ```sh block, the commands that start with ``agentguard``, ``python`` or
  ``opentelemetry-instrument`` run (in order, in the same sandbox) and must exit 0, or the
  status a trailing ``# exit N`` names; ``export NAME=value`` lines set the environment of the
  commands after them; other lines (``pip install``, ``make``, ``docker``) are for the reader's
  machine and are not run here (``make test`` is what runs this file);
* ``<!-- doc-test: file NAME -->`` on the line before a block writes the block to NAME in the
  sandbox instead (an ``app.py`` the next ``sh`` block launches, a policy, a trajectory);
* ``<!-- doc-test: skip REASON -->`` on the line before a block leaves it out, with the reason;
* other blocks (``text`` for terminal output, ``json``, ``yaml`` configuration) are read, not run.

Each page gets one sandbox: the bundled example files (``policy.toml``, ``support_sessions.yaml``,
``more_shapes.yaml``) copied in, this virtual environment first on ``PATH``, and the real
``openai``/``anthropic`` SDKs pointed (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) at a scripted
model on loopback that calls the first tool it is offered with the same arguments five times,
then answers: a stuck agent, so the examples have something to catch.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_agentguard.judge.policy import PolicyError, parse_policy
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "otel_agentguard" / "examples"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = ("python", "toml", "sh")
COMMANDS = ("agentguard", "python", "opentelemetry-instrument")
# Pages other engineers write; the README and the index link to them before they land.
PAGES_WRITTEN_ELSEWHERE = {
    "docs/replay.md", "docs/fake-completion.md", "docs/service.md", "docs/output-repetition.md",
    "docs/already-tracing.md", "docs/providers-and-coexistence.md",
}

_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    line: int
    language: str
    text: str
    marker: str | None = None  # "skip" or "file"
    argument: str = ""

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{name}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        block = Block(page, line, match.group(1).lower(), match.group(2))
        marker = _MARKER.search(before)
        if marker:
            block.marker, block.argument = marker.group(1), marker.group(2)
        found.append(block)
    return found


# --- the scripted model the examples talk to ----------------------------------------------------


def _tool_schemas(request: Request) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for tool in request.body.get("tools") or []:
        if request.api == "chat" and isinstance(tool.get("function"), dict):
            found.append((tool["function"]["name"], tool["function"].get("parameters") or {}))
        elif request.api == "responses" and tool.get("type") == "function":
            found.append((tool["name"], tool.get("parameters") or {}))
        elif request.api == "messages" and "name" in tool:
            found.append((tool["name"], tool.get("input_schema") or {}))
    return found


def _tool_results(request: Request) -> int:
    body = request.body
    if request.api == "chat":
        return sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
    if request.api == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return sum(1 for item in items if isinstance(item, dict) and item.get("type") == "function_call_output")
    return sum(1 for m in body.get("messages") or [] if isinstance(m.get("content"), list)
               for part in m["content"] if isinstance(part, dict) and part.get("type") == "tool_result")


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    names = schema.get("required") or list(properties)
    kinds = {"string": "A1001", "integer": 1, "number": 1.0, "boolean": True}
    return {name: kinds.get((properties.get(name) or {}).get("type"), "A1001") for name in names}


def stuck_model(request: Request) -> Turn:
    """Calls the first tool it is offered with the same arguments five times, then answers."""
    tools = _tool_schemas(request)
    if tools and _tool_results(request) < 5:
        name, schema = tools[0]
        return Turn.call(name, **_arguments(schema))
    return Turn.answer("Your parcel is on its way.")


@pytest.fixture(scope="module")
def model_server():
    with ScriptedModelServer(stuck_model) as server:
        yield server


# --- running a page -----------------------------------------------------------------------------


def sandbox_env(server: ScriptedModelServer) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PYTHON"))}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "OTEL_AGENTGUARD_FINGERPRINT_KEY": "docs-example-key",
        "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
        "OPENAI_API_KEY": "sk-docs", "OPENAI_BASE_URL": server.openai_url,
        "ANTHROPIC_API_KEY": "sk-ant-docs", "ANTHROPIC_BASE_URL": server.anthropic_url,
        "OPENAI_AGENTS_DONT_LOG_MODEL_DATA": "1",
    })
    return env


# The pages a newcomer starts from run as pasted into an empty folder: no example file copied in,
# no OpenTelemetry variable set but what the page exports, no fingerprint key.
NEWCOMER_PAGES = {"README.md", "docs/getting-started.md"}


def run_page(page: Path, folder: Path, server: ScriptedModelServer) -> int:
    """Run every runnable block of the page in order; returns how many ran. Fails on the first error."""
    env = sandbox_env(server)
    if page.is_relative_to(ROOT) and str(page.relative_to(ROOT)) in NEWCOMER_PAGES:
        env = {key: value for key, value in env.items() if not key.startswith("OTEL_")}
    else:
        for name in ("policy.toml", "support_sessions.yaml", "more_shapes.yaml"):
            shutil.copyfile(EXAMPLES / name, folder / name)
    ran = 0
    for block in blocks_of(page):
        if block.marker == "skip":
            assert block.argument, f"{block.where}: a skipped block must say why"
            continue
        if block.marker == "file":
            (folder / block.argument).write_text(block.text, encoding="utf-8")
            continue
        if block.marker is not None:
            pytest.fail(f"{block.where}: unknown doc-test marker {block.marker!r}")
        if block.language == "python":
            script = folder / f"_block_{block.line}.py"
            script.write_text(block.text, encoding="utf-8")
            _expect(block, [sys.executable, script.name], folder, env, 0)
            ran += 1
        elif block.language == "toml":
            try:
                parse_policy(block.text, source=block.where)
            except PolicyError as exc:
                pytest.fail(str(exc))
            ran += 1
        elif block.language == "sh":
            ran += _run_shell(block, folder, env)
    return ran


def _run_shell(block: Block, folder: Path, env: dict[str, str]) -> int:
    ran = 0
    for number, raw in enumerate(block.text.splitlines()):
        line, _, comment = raw.partition("  #")
        line = line.strip()
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            env[name] = os.path.expandvars(shlex.split(value)[0] if value else "")
            continue
        if not line.startswith(COMMANDS):
            continue
        status = re.match(r"\s*exit (\d+)", comment)
        command = ["bash", "-c", line]
        _expect(Block(block.page, block.line + 1 + number, "sh", line), command, folder, env,
                int(status.group(1)) if status else 0)
        ran += 1
    return ran


def _expect(block: Block, command: list[str], folder: Path, env: dict[str, str], status: int) -> None:
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != status:
        pytest.fail(f"{block.where}: exit {done.returncode} (expected {status})\n--- block\n{block.text}"
                    f"\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")


# Pages whose examples need other packages than the test environment has: their own test runs
# them where those packages are installed.
PAGES_RUN_ELSEWHERE = {"docs/already-tracing.md": "tests/foreign/test_already_tracing_doc.py",
                       "docs/fake-completion.md": "tests/test_docs_fake_completion.py"}
RUN_HERE = [page for page in PAGES if str(page.relative_to(ROOT)) not in PAGES_RUN_ELSEWHERE]


@pytest.mark.parametrize("page", RUN_HERE, ids=[str(p.relative_to(ROOT)) for p in RUN_HERE])
def test_every_code_block_of_the_page_runs(page, tmp_path, model_server):
    run_page(page, tmp_path, model_server)


def test_pages_run_elsewhere_have_their_runner():
    for page, runner in PAGES_RUN_ELSEWHERE.items():
        assert (ROOT / runner).is_file() and page in (ROOT / runner).read_text(encoding="utf-8"), page


# --- the runner itself, and the pages' other promises ---------------------------------------------


def test_the_runner_fails_a_broken_example(tmp_path, model_server):
    page = tmp_path / "broken.md"
    page.write_text("```python\nimport otel_agentguard as ag\nag.no_such_function()\n```\n", encoding="utf-8")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    with pytest.raises(pytest.fail.Exception, match="exit 1"):
        run_page(page, sandbox, model_server)


def test_the_runner_fails_a_wrong_exit_status_and_a_bad_policy(tmp_path, model_server):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    page = tmp_path / "status.md"
    page.write_text("```sh\nagentguard check support_sessions.yaml  # exit 1\n```\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"exit 0 \(expected 1\)"):
        run_page(page, sandbox, model_server)
    page.write_text("```toml\n[profiles.default]\nwindw = 3\n```\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match="unknown key"):
        run_page(page, sandbox, model_server)


def test_the_stuck_model_really_loops_through_the_openai_sdk(model_server):
    import openai

    client = openai.OpenAI(base_url=model_server.openai_url, api_key="sk")
    tools = [{"type": "function", "function": {"name": "track", "parameters": {
        "type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "where is it?"}]
    calls = []
    for _ in range(10):
        message = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            calls.append(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "stalled"})
    assert calls == ['{"order": "A1001"}'] * 5
    assert messages[-1]["content"] == "Your parcel is on its way."


def test_pages_exist_and_every_runnable_block_is_run_or_skipped_with_a_reason():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    for required in ("README.md", "CHANGELOG.md", "docs/README.md", "docs/getting-started.md", "docs/policy.md",
                     "docs/probes.md", "docs/enforcement.md", "docs/operations.md", "docs/guarantees.md",
                     "docs/architecture.md", *(f"docs/frameworks/{name}.md" for name in
                                                ("openai", "anthropic", "langchain", "mcp", "openai-agents"))):
        assert required in names, required
    for page in PAGES:
        for block in blocks_of(page):
            if block.marker == "skip":
                assert block.argument, f"{block.where}: a skipped block must say why"
            assert block.language, f"{block.where}: name the block's language (text for output)"


def test_readme_is_short():
    assert (ROOT / "README.md").stat().st_size < 12 * 1024


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_relative_links_point_at_files_in_the_repository():
    for page in PAGES:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            assert path.is_relative_to(ROOT), f"{page.name}: link outside the repository: {target}"
            assert path.exists() or str(relative) in PAGES_WRITTEN_ELSEWHERE, f"{page.name}: broken link {target}"


# Words that point at material outside the repository.
_OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|\.\./shared|\bseed ?0\d\d\b|seed0\d\d|stall-detector article|"
                      r"\bissue #?\d+\b", re.I)


def test_nothing_in_the_repository_refers_to_files_outside_it():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in tracked.stdout.splitlines():
        path = ROOT / name
        if name == "tests/test_docs.py" or not path.is_file() or path.suffix in {".jsonl", ".json"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{name}: {m.group(0)}" for m in _OUTSIDE.finditer(text)]
        if re.search(r"seed\d", name):
            offenders.append(f"{name}: file name")
    assert offenders == []
