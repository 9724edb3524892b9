"""Hostile pull requests against the pin scan (`pins --base --head`): a head that steers git
(attributes, drivers, odd file names, NUL bytes) to hide an added torch install. Each is built
as real commits with git plumbing, so that any name git can store is tried, and driven through
the real command; the answer must never be "no torch change"."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command
from suite.untrusted.shown import shown

INSTALL = b"#!/bin/sh\nset -e\npip install torch==2.99.0\n"
BEFORE = b"#!/bin/sh\nset -e\necho ready\n"


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", *args],
        input=stdin, capture_output=True, check=True,
    )  # fmt: skip
    return proc.stdout.strip()


def _commit(repo: Path, files: dict[bytes, bytes], parent: str | None) -> str:
    """A commit whose tree holds files (name bytes -> content), all at the top level."""
    entries = b""
    for name, content in sorted(files.items()):
        blob = _git(repo, "hash-object", "-w", "--stdin", stdin=content).decode()
        entries += b"100644 blob " + blob.encode() + b"\t" + name + b"\0"
    tree = _git(repo, "mktree", "-z", stdin=entries).decode()
    argv = ["commit-tree", tree, "-m", "x", *(("-p", parent) if parent else ())]
    return _git(repo, *argv).decode()


def _pins(
    tmp_path: Path, base: dict[bytes, bytes], head: dict[bytes, bytes], marker: Path | None = None
) -> dict[str, object]:
    """pins on the two commits, the head checked out; marker: removed once the checkout ran (a
    filter it ran is the checkout's, not the scan's)."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q")
    old = _commit(repo, base, None)
    new = _commit(repo, head, old)
    # The head checked out, as on a runner: its attributes are in the work tree.
    _git(repo, "update-ref", "HEAD", new)
    _git(repo, "reset", "-q", "--hard", new)
    if marker is not None:
        marker.unlink(missing_ok=True)
    argv = ["--base", old, "--head", new, "--repo", str(repo), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, object] = json.loads(result.stdout)
    return record


def _hidden(record: dict[str, object]) -> bool:
    return record["status"] == "unchanged" or record["run"] is not True


ATTRIBUTES = {
    "every file binary (-diff)": b"* -diff\n",
    "binary macro": b"* binary\n",
    "one file binary": b"install.sh -diff -text\n",
    "a diff driver named": b"*.sh diff=hide\n",
    "an external diff": b"* diff=external-hide\n",
    "a filter": b"* filter=hide\n",
    "text off, eol": b"* -text eol=crlf\n",
    "export-ignore and linguist": b"* export-ignore linguist-generated=true\n",
}


@pytest.mark.parametrize("attributes", sorted(ATTRIBUTES))
def test_the_heads_attributes_do_not_blind_the_scan(tmp_path: Path, attributes: str) -> None:
    """A head that adds .gitattributes beside the install it adds: before, `* -diff` turned
    the change into "Binary files differ" and the answer into "no torch change"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    # A runner's config the head's attributes could call: a driver that would hide the change,
    # with a marker that says whether it ever ran.
    marker = tmp_path / "driver-ran"
    hide = f"sh -c 'touch {marker}; printf nothing'"
    for key, value in (("diff.hide.textconv", hide), ("diff.hide.binary", "true"),
                       ("diff.external-hide.command", hide), ("filter.hide.clean", hide),
                       ("filter.hide.smudge", hide)):  # fmt: skip
        _git(repo, "config", key, value)
    record = _pins(
        tmp_path,
        {b"install.sh": BEFORE},
        {b"install.sh": INSTALL, b".gitattributes": ATTRIBUTES[attributes]},
        marker,
    )
    assert not _hidden(record), record
    assert {u["file"] for u in record["unknown"]} == {"install.sh"}  # type: ignore[union-attr]
    assert not marker.exists(), "a driver the head named ran"


def test_attributes_of_the_repository_itself_are_not_read(tmp_path: Path) -> None:
    """.git/info/attributes (a persistent runner's clone) and a nested .gitattributes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_bytes(b"* -diff\n")
    record = _pins(
        tmp_path,
        {b"install.sh": BEFORE},
        {b"install.sh": INSTALL, b".gitattributes": b"**/*.sh binary\n"},
    )
    assert not _hidden(record), record


# Names git quotes in `git diff` (or that a reader could mistake): each holds the install.
NAMES = [
    b'ci"install.sh', b"ci\\install.sh", b"tab\there.sh", b"new\nline.sh", b"cr\rname.sh",
    b"spa ce.sh", b" leading.sh", b"\xc3\xbcn\xc3\xafcode.sh", b"\xff\xfenot-utf8.sh",
    b"-rf.sh", b"--output=x.sh", b"::error::x.sh", b"\x1b[31mred.sh", b'"quoted".sh',
    b"a -> b.sh", b"\xe2\x80\xaeevil.sh", b"bell\x07.sh", b"ends-with-space.sh ",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES, ids=[repr(n) for n in NAMES])
def test_a_name_git_quotes_is_never_dropped(tmp_path: Path, name: bytes) -> None:
    """A new file of any name that holds a torch install makes the answer unknown, naming it;
    before, a quoted name (`ci"install.sh`) was dropped and the answer was no change."""
    record = _pins(tmp_path, {b"README.md": b"x\n"}, {b"README.md": b"x\n", name: INSTALL})
    assert not _hidden(record), record
    files = {u["file"] for u in record["unknown"]}  # type: ignore[union-attr]
    assert files == {name.decode("utf-8", "surrogateescape")}
    message = str(record["message"])
    assert "\n" not in message and "\r" not in message and "\x1b" not in message
    assert shown(name.decode("utf-8", "surrogateescape")) in message


def test_a_nul_byte_does_not_make_a_script_binary(tmp_path: Path) -> None:
    """git calls a file with a NUL binary and `git diff` shows no line of it; a shell still runs
    the lines before and after the NUL."""
    record = _pins(
        tmp_path, {b"install.sh": BEFORE}, {b"install.sh": INSTALL + b"# \0\0\0 padding\n"}
    )
    assert not _hidden(record), record


def test_a_refs_that_reads_as_an_option_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _commit(repo, {b"a": b"a\n"}, None)
    argv = ["--base", "--output=/tmp/x", "--head", "HEAD", "--repo", str(repo)]
    result = CliRunner().invoke(pins_command, argv)
    assert result.exit_code == 2
    assert "not a ref" in result.output


def _random_name(rng: random.Random) -> bytes:
    while True:
        size = rng.randint(1, 24)
        name = bytes(rng.choice([b for b in range(1, 256) if b != ord("/")]) for _ in range(size))
        if name not in (b".", b"..", b".git", b".gitattributes") and not name.lower().endswith(
            (b".md", b".rst", b".html", b".htm", b".ipynb", b".tex", b".adoc", b".mdx")
        ):
            return name


def test_random_names_and_attributes_never_hide_an_install(tmp_path: Path) -> None:
    """A seeded property: random bytes as the name of the file that gains the install, and
    random attribute lines (random patterns and attributes, the ones that blind git among them)
    in the head's .gitattributes. The answer is never "no torch change"."""
    rng = random.Random(20261207)
    words = [b"-diff", b"binary", b"-text", b"diff=x", b"filter=x", b"merge=x", b"eol=lf",
             b"working-tree-encoding=UTF-16", b"ident", b"export-subst"]  # fmt: skip
    for case in range(12):
        name = _random_name(rng)
        lines = []
        for _ in range(rng.randint(1, 4)):
            pattern = rng.choice([b"*", b"**", name.replace(b"\n", b"?"), b"*.sh", b"[!a]*"])
            lines.append(pattern + b" " + b" ".join(rng.sample(words, rng.randint(1, 3))))
        head = {name: INSTALL, b".gitattributes": b"\n".join(lines) + b"\n", b"keep": b"k\n"}
        record = _pins(tmp_path / str(case), {b"keep": b"k\n"}, head)
        assert not _hidden(record), (name, lines, record)


def test_a_change_too_large_to_read_whole_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the per-file or the total cap, the change is not scanned, and says so: a head
    cannot hide an install behind bulk."""
    import suite.untrusted.git as git

    monkeypatch.setattr(git, "MAX_TOTAL_BYTES", 4096)
    bulk = {f"data{i}.bin".encode(): bytes(1000) for i in range(5)}
    record = _pins(tmp_path / "total", {b"keep": b"k\n"}, {b"keep": b"k\n", **bulk})
    assert record["status"] == "unknown", record
    assert "read for one change" in str(record["message"])
    monkeypatch.setattr(git, "MAX_FILE_BYTES", 512)
    record = _pins(tmp_path / "file", {b"keep": b"k\n"}, {b"keep": b"k\n", b"big.sh": INSTALL * 40})
    assert record["status"] == "unknown", record
    assert "big.sh is 0 MiB, above" in str(record["message"])


def test_a_submodule_moved_is_read_as_git_shows_it(tmp_path: Path) -> None:
    """A submodule is a commit, not a file: its move is the line git shows, and no error."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    first = _commit(repo, {b"a": b"a\n"}, None)
    second = _commit(repo, {b"a": b"b\n"}, first)

    def with_module(commit: str, parent: str | None) -> str:
        blob = _git(repo, "hash-object", "-w", "--stdin", stdin=b"x\n").decode()
        tree = _git(
            repo, "mktree", "-z",
            stdin=f"100644 blob {blob}\tx\0160000 commit {commit}\tvendor\0".encode(),
        ).decode()  # fmt: skip
        return _git(
            repo, "commit-tree", tree, "-m", "m", *(("-p", parent) if parent else ())
        ).decode()

    old = with_module(first, None)
    new = with_module(second, old)
    argv = ["--base", old, "--head", new, "--repo", str(repo), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "unchanged"


def test_many_pin_files_are_read_to_a_total_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pin files are capped one by one and all together: past the total, a changed pin file is
    not read and the answer is unknown, naming it."""
    import suite.pins.refs as refs

    monkeypatch.setattr(refs, "MAX_TOTAL_BYTES", 300)
    filler = b"# " + b"x" * 100 + b"\nnumpy==2.1.0\n"
    head = {f"requirements-{i}.txt".encode(): filler + b"# %d\n" % i for i in range(4)}
    head[b"requirements-z.txt"] = b"torch==2.99.0\n"
    record = _pins(tmp_path, {b"keep": b"k\n"}, {b"keep": b"k\n", **head})
    assert record["status"] == "unknown", record
    assert "read for all pin files of one ref" in str(record["message"])
