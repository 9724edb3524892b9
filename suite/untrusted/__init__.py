"""The room where a pull request's bytes enter the suite. What the head holds is data here: read
with tools that take no instruction from it, bounded, validated, and handed out as typed
records; nothing in this package imports, executes or evaluates it.

The ways head content enters, and where:
- `git`: the head's commits. Which files changed and their contents, by object id, with git
  run so that nothing in the tree it reads steers it (no attributes, textconv or external
  diff; names NUL-separated, never quoted or dropped), under a per-file, total and file-count
  cap; what cannot be read makes the answer unknown. The pin scan (suite/pins/scan.py) and the
  pin readers (suite/pins/refs.py: each ref's pin files, capped per file and in total) read
  through it.
- `artifacts`: the bench jobs' uploaded results, which candidate-side code could write into.
  A job's results are only its artifact's root; a run.json or decision.json anywhere else, or
  a link, is a stray: named, never judged, and the decision is at least defer. The job each
  side's run.json records (ab --job) must be the artifact's own (claimed_job), or the
  results are not judged and the job did not report.
- The head's matrix (`plan --head-matrix`, suite/cli/ci.py) is read as YAML only, never
  imported: a workload only it names is named as new and not run.
- `shown`: any head-chosen text (a file name, a line) on its way to a log or a workflow
  command: escaped so that it is one line that GitHub never reads as a command.

- `decision`: the decision artifact the comment job reads (a same-repository pull request can
  edit the caller workflow that uploads it): a plain file, read once under a cap, valid against
  the decision schema; the comment checks that it is the event's head (full SHAs only).

Not here, and why: the index URLs the head's pin files name are refused where pip would use
them (suite/execute/indexes.py: a host the base branch does not approve is never used), since
that is where the base's approved hosts are known.
"""
