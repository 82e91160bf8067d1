"""An honest stand-in model for ``repo_audit.py``: it knows only the request it is sent.

The workload is "find every function without a docstring". The model plays
each role from its prompt alone — the system prompt says which, the task
header says the stage — and keeps no memory between calls: what it knows is
the messages and tool results in the request. As a coder it reads its batch
(the input artifact listing its files), reads each file with ``read_file`` in
the chunks the tool returns, and reports a function only when that function's
``def`` line and the first statement of its body are in a ``read_file``
result it was sent: whatever the context engine cleared or cut before the
model saw it shows up as a miss. After each chunk it appends what it found
to its audit file (``audit/<first item>.txt``) with a ``# done PATH A-B of N``
line, in the same turn as the next read; the audit file, read back when the
marks are no longer in the context, is how it knows where it stopped.

A function is judged from the chunk's text by a scanner that knows where
strings start and end (a chunk always starts outside a string, at a line the
previous chunk's scan marked safe), so a ``def`` inside a docstring is never
taken for one. A docstring is a first statement that is a plain string
literal (``f``- and ``b``-strings are not), as ``ast.get_docstring`` says.

``serve`` runs it as an OpenAI-compatible server in its own process (the
answers wait ``--delay-s``); ``answer`` is the policy, which the benchmark's
naive single agent calls in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from slow_openai import SlowServer, _response, serve_until_signalled

from workers.context.tokens import Tokenizer

TOKENS = Tokenizer()
CHUNK = 3_000  # lines asked for per read_file (the tool returns what its slot holds)
BATCHES = 48  # how many batches the planner aims for
GOAL = "Find every function without a docstring"
FIX_GOAL = "Make the repository's tests pass"
_HEADER = re.compile(r"^(?P<path>\S.*): lines (?P<a>\d+)-(?P<b>\d+) of (?P<n>\d+)$")
_NONE = re.compile(r"^(?P<path>\S.*): has (?P<n>\d+) lines, none from \d+$")
_NUMBERED = re.compile(r"^(\d+): (.*)$")
_DONE = re.compile(r"^# done (?P<path>.+) (?P<a>\d+)-(?P<b>\d+) of (?P<n>\d+)$")
_FINDING = re.compile(r"^(?P<path>[^#\s][^:]*):(?P<line>\d+):(?P<name>\w+)$")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")
_DOCSTRING = re.compile(r"""^[rRuU]?("|')""")


def count_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """What a call costs in input: every message's text and arguments, and the tool schemas."""
    total = sum(TOKENS.count(json.dumps(t)) for t in tools)
    for m in messages:
        total += 4 + TOKENS.count(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            total += TOKENS.count(c["function"]["name"] + c["function"]["arguments"])
    return total


# -- reading the request ----------------------------------------------------------------------


@dataclass
class Seen:
    """What one request shows: the calls made, each with its result if still in context."""

    texts: list[str] = field(default_factory=list)  # system and user messages
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)

    @classmethod
    def of(cls, messages: list[dict[str, Any]]) -> Seen:
        seen, results = cls(), {}
        for m in messages:
            if m.get("role") == "tool":
                results[m.get("tool_call_id")] = m.get("content") or ""
        for m in messages:
            if m.get("role") in ("system", "user"):
                seen.texts.append(m.get("content") or "")
            for c in m.get("tool_calls") or ():
                try:
                    arguments = json.loads(c["function"]["arguments"] or "{}")
                except ValueError:
                    arguments = {}
                seen.calls.append((c["function"]["name"], arguments, results.get(c.get("id"))))
        return seen

    def text(self) -> str:
        return "\n".join(self.texts)

    def made(self, name: str) -> list[tuple[dict[str, Any], str | None]]:
        return [(a, r) for n, a, r in self.calls if n == name]

    def field(self, name: str) -> str:
        found = re.search(rf"^{re.escape(name)}: (.*)$", self.text(), re.M)
        return found.group(1) if found else ""


def _ok(result: str | None) -> bool:
    return result is not None and not result.startswith("error")


def _numbered(result: str) -> tuple[re.Match[str] | None, dict[int, str]]:
    """A read_file or read_lines result: its header (if any) and its numbered lines."""
    header, lines = None, {}
    for raw in result.splitlines():
        head = _HEADER.match(raw) or _NONE.match(raw)
        if head and header is None:
            header = head
            continue
        line = _NUMBERED.match(raw)
        if line:
            lines[int(line.group(1))] = line.group(2)
    return header, lines


# -- the scanner: where strings are, so a def is judged only where it is code -----------------


@dataclass(frozen=True)
class Line:
    number: int
    text: str
    safe: bool  # starts outside any string, bracket and continuation: a statement may begin


def scan(lines: dict[int, str], start: int, end: int) -> list[Line]:
    """Lines start..end, each marked safe or not; ``start`` must be a safe line."""
    out, quote, depth, continued = [], None, 0, False
    for n in range(start, end + 1):
        text = lines[n]
        out.append(Line(n, text, quote is None and depth == 0 and not continued))
        i, single = 0, None
        while i < len(text):
            ch = text[i]
            if quote:  # inside a triple-quoted string
                if text.startswith(quote, i) and not _escaped(text, i):
                    i, quote = i + 3, None
                    continue
            elif single:
                if ch == single and not _escaped(text, i):
                    single = None
            elif ch == "#":
                break
            elif text.startswith('"""', i) or text.startswith("'''", i):
                quote = text[i : i + 3]
                i += 3
                continue
            elif ch in "\"'":
                single = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(0, depth - 1)
            i += 1
        continued = text.rstrip().endswith("\\") and quote is None
    return out


def _escaped(text: str, i: int) -> bool:
    backslashes = len(text[:i]) - len(text[:i].rstrip("\\"))
    return backslashes % 2 == 1


def judge(
    path: str, lines: dict[int, str], start: int, end: int, total: int
) -> tuple[list[str], int]:
    """Findings ``path:line:name`` for the defs of start..end whose first statement is there
    too, and the last line judged: the next chunk starts right after it, at a line the scan
    knows to be outside any string (a chunk that ends inside a docstring is judged up to
    where that docstring's statement began)."""
    scanned = scan(lines, start, end)
    by_number = {ln.number: ln for ln in scanned}
    cut = end + 1
    if end < total:
        cut = next((ln.number for ln in reversed(scanned[1:]) if ln.safe), end + 1)
    findings = []
    for ln in scanned:
        if ln.number >= cut:
            break
        match = _DEF.match(ln.text) if ln.safe else None
        if not match:
            continue
        first = _first_statement(by_number, ln.number, end)
        if first is None:  # its body is past this chunk: judged with the next one
            cut = ln.number
            break
        if not _DOCSTRING.match(first):
            findings.append(f"{path}:{ln.number}:{match.group(1)}")
    return findings, min(cut - 1, total)


def _first_statement(by_number: dict[int, Line], def_line: int, end: int) -> str | None:
    """The first statement of the body of the def at ``def_line``, or None if not in sight."""
    depth, n = 0, def_line
    while n <= end:
        text = by_number[n].text
        header_end = _header_end(text, depth)
        if header_end is None:
            depth += text.count("(") + text.count("[") + text.count("{")
            depth -= text.count(")") + text.count("]") + text.count("}")
            n += 1
            continue
        rest = text[header_end + 1 :].strip()
        if rest and not rest.startswith("#"):
            return rest  # def f(): return 1
        for m in range(n + 1, end + 1):
            body = by_number[m].text.strip()
            if body and not body.startswith("#"):
                return body
        return None
    return None


def _header_end(text: str, depth: int) -> int | None:
    """Where the def header's ':' is on this line (at bracket depth 0, outside strings)."""
    single = None
    for i, ch in enumerate(text):
        if single:
            if ch == single and not _escaped(text, i):
                single = None
        elif ch in "\"'":
            single = ch
        elif ch == "#":
            return None
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0:
            return i
    return None


# -- the roles ------------------------------------------------------------------------------


def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for this request: {content, tool_calls: [(name, arguments)]}."""
    seen = Seen.of(messages)
    system = seen.texts[0] if seen.texts else ""
    if "You are the planner" in system:
        return _planner(seen)
    if "You are the reviewer" in system:
        return _reviewer(seen)
    if "You are a coder" in system:
        return _coder(seen)
    return _say("I have nothing to do in this role.")


def _say(text: str, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"content": text, "tool_calls": list(calls)}


def _planner(seen: Seen) -> dict[str, Any]:
    stage = seen.field("stage").rpartition("/")[2].split(".")[0]
    if seen.field("goal of the job") == FIX_GOAL and stage not in ("review", "report"):
        return _fix_planner(seen)
    if stage == "review":
        return _say(
            "The batches are done.",
            (
                "dispatch_reviewer",
                {"brief": "Run the check of F1 over the audit and give the verdict."},
            ),
        )
    if stage == "report":
        text = seen.text()
        failing = "FAILS" in text
        tried = seen.made("dispatch_batches")
        if failing and not tried:
            return _say(
                "Some items failed; once more.",
                (
                    "dispatch_batches",
                    {"brief": "Audit these files again: " + BRIEF, "batch_size": 5},
                ),
            )
        return _say(
            "The audit is in audit/: one line path:line:name per function without a docstring."
        )
    if not any(_ok(r) for _, r in seen.made("write_features")):
        return _say(
            "One feature: the audit, checked for coverage.",
            (
                "write_features",
                {
                    "features": [
                        {
                            "id": "F1",
                            "description": "every function without a docstring in "
                            "every Python file is listed in audit/, every file read whole",
                            "check": "workspace",
                        }
                    ]
                },
            ),
        )
    files = re.search(r"^WORKSPACE \((\d+) files", seen.text(), re.M)
    # About BATCHES batches, of 5 files at least: a batch costs a few calls of its own.
    size = max(5, math.ceil(int(files.group(1)) / BATCHES)) if files else 5
    return _say(
        "A batch of files per coder.",
        (
            "plan_items",
            {"source": "files", "pattern": "**/*.py", "batch_size": size, "brief": BRIEF},
        ),
    )


BRIEF = (
    "Find every function (def and async def, methods and nested functions too) without a "
    "docstring in each file of your batch. Read each file whole with read_file, and append "
    "what you find to your audit file, one line path:line:name per function."
)


def _reviewer(seen: Seen) -> dict[str, Any]:
    runs = [r for _, r in seen.made("run_checks") if r is not None]
    if not runs:
        return _say("", ("run_checks", {"feature_ids": ["F1"]}))
    passed = "F1 (workspace): passed" in runs[-1]
    return _say(
        "",
        (
            "submit_verdicts",
            {
                "verdicts": [
                    {
                        "feature_id": "F1",
                        "passes": passed,
                        "note": "the audit check " + ("passed" if passed else "failed"),
                    }
                ]
            },
        ),
    )


@dataclass
class _Batch:
    artifact: str
    paths: list[str]


def _audit(artifact: str) -> str:
    """My audit file: named by my batch's artifact id, which my task header always shows."""
    return f"audit/{artifact}.txt"


def _coder(seen: Seen) -> dict[str, Any]:
    batch_ref = re.search(r"\[artifact (a-[0-9a-f]{16}) batch ", seen.text())
    if batch_ref is None:
        return _say("I was given no batch.")
    artifact = batch_ref.group(1)
    if seen.field("goal of the job") == FIX_GOAL:
        batch = _batch(seen, artifact)
        if batch is None:
            return _say("", ("read_lines", {"id": artifact, "start": 1, "end": 5_000}))
        return _fixer(seen, batch)
    audit = _audit(artifact)
    done, known = _progress(seen, audit)
    # First what is in sight and not yet judged: a seen result may be cleared from the next
    # request, so it is judged now, whatever else is missing.
    text = ""
    for path, lines, start, end, total in _chunks(seen, audit):
        if _covered(done.get(path), start, end, total):
            continue
        findings, judged = judge(path, lines, start, end, total)
        if judged < start:  # a def whose header alone fills the chunk: judged as unseen
            judged = end
        text += "".join(f"{f}\n" for f in findings) + f"# done {path} {start}-{judged} of {total}\n"
        done[path] = (max(done.get(path, (0, 0))[0], judged), total)
    calls: list[tuple[str, dict[str, Any]]] = []
    if text:  # with where every file stands: the latest append says it all
        calls.append(("append_file", {"path": audit, "text": text + _progress_line(done)}))
    batch = _batch(seen, artifact)
    if batch is None:
        calls.append(("read_lines", {"id": artifact, "start": 1, "end": 5_000}))
    if not known:  # my marks are out of sight: the audit file says where I stopped
        calls.append(("read_file", {"path": audit, "start": 1, "end": 100_000}))
    if batch is not None and known:
        following = _next_read(batch, done)
        if following:
            calls.append(("read_file", following))
        elif not any(_ok(r) for _, r in seen.made("report_items")):
            calls.append(("report_items", {"all_done": True}))  # with the last append
    if calls:
        return _say("", *calls)
    return _say(f"Audited {len(batch.paths) if batch else 0} files; the findings are in {audit}.")


def _progress_line(done: dict[str, tuple[int, int]]) -> str:
    return "# progress " + " ".join(f"{p}:{j}/{n}" for p, (j, n) in sorted(done.items())) + "\n"


def _batch(seen: Seen, artifact: str) -> _Batch | None:
    for arguments, result in seen.made("read_lines"):
        if arguments.get("id") == artifact and _ok(result):
            _, lines = _numbered(result or "")
            items = [line.split("\t", 1) for line in lines.values() if "\t" in line]
            if items:
                return _Batch(artifact, [p for _, p in items])
    return None


def _progress(seen: Seen, audit: str) -> tuple[dict[str, tuple[int, int]], bool]:
    """Path -> (last line judged, lines in all), from my marks in sight: the appends I see
    made, or my audit file read back; and whether they are complete (a progress line, or
    the audit file, is in sight)."""
    marks, known = [], False
    for arguments, result in seen.made("append_file"):
        if arguments.get("path") == audit and _ok(result):
            marks += arguments.get("text", "").splitlines()
    for arguments, result in seen.made("read_file"):
        if arguments.get("path") == audit and result is not None:
            known = True  # read back (an error: there is no audit file yet)
            if _ok(result):
                marks += _numbered(result)[1].values()
    done: dict[str, tuple[int, int]] = {}
    for mark in marks:
        if mark.startswith("# progress "):
            known = True
            for part in mark.removeprefix("# progress ").split():
                path, _, state = part.rpartition(":")
                judged, total = (int(x) for x in state.split("/"))
                if path not in done or judged > done[path][0]:
                    done[path] = (judged, total)
            continue
        m = _DONE.match(mark)
        if m and (m["path"] not in done or int(m["b"]) > done[m["path"]][0]):
            done[m["path"]] = (int(m["b"]), int(m["n"]))
    return done, known


def _chunks(seen: Seen, audit: str) -> Iterator[tuple[str, dict[int, str], int, int, int]]:
    """The read_file results in sight, but my audit file's: path, lines, start, end, total."""
    for arguments, result in seen.made("read_file"):
        path = arguments.get("path")
        if not path or path == audit or not _ok(result):
            continue
        header, lines = _numbered(result or "")
        if header is None:
            continue
        total = int(header["n"])
        if "a" not in header.groupdict():  # nothing from where I asked: the file ends before
            yield path, {}, total + 1, total, total
            continue
        start, end = int(header["a"]), int(header["b"])
        if all(n in lines for n in range(start, end + 1)):
            yield path, lines, start, end, total


def _covered(done: tuple[int, int] | None, start: int, end: int, total: int) -> bool:
    return done is not None and done[0] >= min(end, total) and start <= done[0] + 1


def _next_read(batch: _Batch, done: dict[str, tuple[int, int]]) -> dict[str, Any] | None:
    for path in batch.paths:
        judged, total = done.get(path, (0, -1))
        if total < 0 or judged < total:
            return {"path": path, "start": judged + 1, "end": judged + CHUNK}
    return None


# -- the fix workload: a failing test, a docstring that says what its function returns ----


FIX_BRIEF = (
    "For each test file of your batch: read it, read the function it tests, and where the "
    "function does not return what its docstring says, fix it with the smallest edit."
)
_IMPORT = re.compile(r"^from ([\w.]+) import (\w+)$")
_CONTRACT = re.compile(r'^\s*"""Return (.+)\."""$')
_RETURN = re.compile(r"^(\s*)return (.+)$")


def _fix_planner(seen: Seen) -> dict[str, Any]:
    if not any(_ok(r) for _, r in seen.made("write_features")):
        feature = {"id": "F1", "description": "the repository's own tests pass",
                   "check": "workspace"}  # fmt: skip
        return _say("One feature: the tests pass.", ("write_features", {"features": [feature]}))
    return _say(
        "A batch of test files per coder.",
        (
            "plan_items",
            {"source": "files", "pattern": "tests/test_*.py", "batch_size": 2, "brief": FIX_BRIEF},
        ),
    )


def _visible_file(seen: Seen, path: str) -> dict[int, str] | None:
    """The whole of ``path`` if a read_file result in sight shows it all."""
    for arguments, result in seen.made("read_file"):
        if arguments.get("path") != path or not _ok(result):
            continue
        header, lines = _numbered(result or "")
        whole = header is not None and "a" in header.groupdict()
        if whole and int(header["a"]) == 1 and int(header["b"]) == int(header["n"]):
            return lines
    return None


def _fixer(seen: Seen, batch: _Batch) -> dict[str, Any]:
    edited = {a.get("path") for a, r in seen.made("edit_file") if r is not None}
    for test in batch.paths:
        lines = _visible_file(seen, test)
        if lines is None:
            return _say("", ("read_file", {"path": test, "start": 1, "end": CHUNK}))
        imports = [m.groups() for m in map(_IMPORT.match, lines.values()) if m]
        for module, name in imports:
            path = module.replace(".", "/") + ".py"
            if path in edited:
                continue
            source = _visible_file(seen, path)
            if source is None:
                return _say("", ("read_file", {"path": path, "start": 1, "end": CHUNK}))
            fix = _wrong_return(source, name)
            if fix:
                old, new = fix
                return _say(f"{name} does not return what its docstring says.",
                            ("edit_file", {"path": path, "old": old, "new": new}))  # fmt: skip
    if not any(_ok(r) for _, r in seen.made("report_items")):
        return _say("", ("report_items", {"all_done": True}))
    return _say(f"Checked the functions under {len(batch.paths)} test files.")


def _wrong_return(source: dict[int, str], name: str) -> tuple[str, str] | None:
    """(old, new) text fixing ``name``'s return to its docstring's, if they differ."""
    numbers = sorted(source)
    for i, n in enumerate(numbers):
        if not re.match(rf"^def {name}\(", source[n]) or i + 2 >= len(numbers):
            continue
        doc, ret = source[numbers[i + 1]], source[numbers[i + 2]]
        said, done = _CONTRACT.match(doc), _RETURN.match(ret)
        if said and done and said.group(1) != done.group(2):
            old = "\n".join([source[n], doc, ret])
            return old, "\n".join([source[n], doc, f"{done.group(1)}return {said.group(1)}"])
    return None


# -- the server -----------------------------------------------------------------------------


class HonestServer(SlowServer):
    """``slow_openai``'s server, answering from the policy instead of a script."""

    def __init__(self, delay_s: float) -> None:
        super().__init__({"roles": {}}, delay_s)
        self.input_tokens = 0

    def _answer(self, body: bytes) -> bytes:
        request = json.loads(body)
        messages, tools = request["messages"], request.get("tools") or []
        reply = answer(messages)
        tokens = count_tokens(messages, tools)
        self.input_tokens += tokens
        self.by_key[reply["tool_calls"][0][0] if reply["tool_calls"] else "answer"] += 1
        calls = [
            {"id": f"call_{self.answered}_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}
            for i, (name, arguments) in enumerate(reply["tool_calls"])
        ]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": reply["content"] or None}
        if calls:
            message["tool_calls"] = calls
        out = {
            "model": "honest",
            "choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 20 + 10 * len(calls)},
        }
        return _response(200, json.dumps(out).encode())

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "input_tokens": self.input_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-s", type=float, default=1.0, help="seconds before each answer")
    parser.add_argument("--port-file", required=True, help="where to write the port")
    args = parser.parse_args()
    asyncio.run(serve_until_signalled(HonestServer(args.delay_s), args.port_file))


if __name__ == "__main__":
    main()
