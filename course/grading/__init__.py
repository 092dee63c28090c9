"""Grading submitted exercise notebooks: six processes at four trust levels, and the threat model.

``python -m course.grading --submissions DIR --out DIR`` grades every student's notebooks
(``DIR/<student>/**/<exNN_name>.ipynb``; nbgrader's ``submitted/<student>/<assignment>/``
layout works too) and writes ``grades.csv``, ``grades.json`` and feedback notebooks.

This docstring is the one statement of the threat model; the modules link here.

Threat model
------------
A student may hand in any code, written to raise their own or anyone's score. Only a
submission's answer cells are used, matched by ``grade_id``; everything else, the visible
and hidden checks included, comes from the instructor source. A submission that is a
symbolic or hard link is refused, not followed. Six processes at four trust levels, each
level trusting the ones below it less::

    1. the host: the instructor's uid; runs no student code
    grader  (classroom.py, submission.py, judges.py, report.py)
      |  ^   JSON lines, one reply per request: begin, setup cells, answers, checks go down;
      |  |   one request goes up: the judge's "place" {key, pid} (put this checker into the
      |  |   exercise's cgroups), answered "placed" {ok} before the checker may go on; keeps
      v  |   only the reply fields it knows; writes the report once every judge is dead
    ------------------------------------------------------------------------------------------
    2. inside the sandbox (bubblewrap, a uid of its own): instructor code only, no check kept
    judge  (inside/judge.py)  reads the requests, passes each check cell on
      +-- zygote  (inside/processes.py)  forked before any request is read; imports
          |                              the setup's modules; per submission it forks
          +-- template  (inside/processes.py)  runs the setup cells, never holds a
              |                                check cell; per exercise it forks
    ------------------------------------------------------------------------------------------
    3. instructor code beside the answer's objects: not dumpable, reports through its own pipe
              +-- checker  (inside/checker.py)  runs the check cell; the answer's names
                  |                             are handles
                  |  a socket: plain data only (inside/channel.py, codec.py, ops.py,
                  |  remote.py, argstate.py)
    ------------------------------------------------------------------------------------------
    4. student code
                  +-- answer process  (inside/answer.py)  runs the answer cells, serves
                                                           the checker's calls

- *Who runs what.* The grader never runs student code. The judge runs only instructor
  code. Every checker and answer process is forked from a template, which the judge's zygote
  forked fresh for the submission; the zygote was made before the judge read any request, so
  no template holds a check cell or another submission's answers (the judge reads them to
  pass them on, and freed text stays in its memory); the answer process is forked (through
  the checker) before the checker reads its own exercise's check cell, so no answer process
  ever holds the text of any check. It runs the answer cells, which are
  refused unless their top level is only imports, ``def``, ``class`` and constants
  (``inside/answer_rules.py``), in plain Python (no IPython: input and AST transformers do
  not exist). In the checker each name an answer defines is a handle whose calls cross a
  socket and come back as data: values rebuilt from bytes with exact types, read by an
  unpickler that refuses every global; a tensor of a subclass arrives as a plain tensor of
  its data. A handle does not compare, convert or add, so an object that "equals anything"
  equals nothing; it forwards no dunder attribute but ``__dict__`` and ``__name__`` (so no
  ``__torch_function__``, ``__array_interface__``...: torch and NumPy never dispatch to the
  answer's code), and it claims no class with C behind it (tensors, arrays, NumPy scalars,
  images), so C code never reads a handle as one of its objects. The checker is not dumpable (no ptrace, no
  ``/proc/PID/mem``) and reports JSON through a pipe of its own. So an answer earns its own
  exercise's points by the data it returns and nothing else.
- *One judge for every submission of every notebook.* Its zygote imports what the setup cells of
  all the notebooks import, once. Each submission starts from a fresh template and sees only its
  own earlier answers, and its setup cells find the working copy as the first submission's found
  it (the judge removes what the last one's setup cells left); between exercises (of one
  submission or the next) the judge kills every process left, removes the files created and
  stops on a changed one, as it always did between exercises. An answer runs under the judge's
  uid and may signal the zygote or a template: a zygote that forks no fresh template, or a
  template that stops answering, ends the judge, and the grader starts a fresh one for the
  submissions left without charging them (``judges.run_notebooks``).
- *Integrity records, not penalties.* The answer process reports what it rebound among the
  libraries and the setup's names (``torch.allclose = ...`` in its own memory). That
  protects nothing (the checks run in the checker's memory), so it is recorded in
  ``grades.json`` under ``integrity`` (kind ``rebound``) and never changes a score: an
  honest answer whose libraries rebind names as they load (``torch._dynamo``) loses nothing.
  What does score zero: an answer that defines a name the checks call (``def checks``,
  ``def abs``), and an answer that changed a file the setup made (the judge then stops and a
  fresh one grades the rest); both are recorded as kind ``checker``.
- *The sandbox* (bubblewrap, ``sandbox.bwrap_prefix``) is built from an allow-list. Read-only
  it shows the system's library folders (``/usr`` and the ``/bin``, ``/lib`` links), the files of
  ``/etc`` the interpreter and torch need (``ETC``: the linker's cache, ``hosts`` and
  ``nsswitch.conf`` for ``localhost``, the time zone, fonts), the interpreter's prefixes
  (``sys.prefix`` and ``sys.base_prefix``: the venv and the Python it was made from), ``common/``
  and what runs inside (``course/grading/inside/``, and the student runtime ``course/student/`` that
  the setup cells import); no instructor tooling (``course/assignments/``, ``course/publishing/``, the
  host side of ``course/grading/``: ``judges.EXPOSED``). Writable: the working copy, which is
  also its private ``/tmp`` and holds an empty HOME, and a ``/dev/shm`` of its own. Nothing else
  exists in it: not the repository (``.git``, ``tests/``, the exercise sources), the submissions,
  the report, another checkout or a backup of the sources, ``/root``, any user's home (``~/.ssh``),
  ``/sys``; the grader refuses to start if the repository, the sources, the submissions or the
  report lie inside a folder it shows (``judges.allow_list``). No network (a loopback of its own);
  its own PID namespace (everything ends with it); the working copy holds no checks.
- *A uid of its own, whoever starts the grader* (``uids``). As root, bubblewrap keeps uid 0 only
  to build the sandbox; ``setpriv`` then runs the judge under a uid nobody else uses
  (``judge_uid``), without any capability and never with new privileges, so the kernel checks
  every file against a uid that owns nothing. Started by an ordinary user (the normal case for an
  instructor) who has subordinate uids (``/etc/subuid`` and ``/etc/subgid``, mapped by the setuid
  helpers ``newuidmap``/``newgidmap`` of the ``uidmap`` package), the judge starts in a user
  namespace of its own whose root is the instructor's uid and whose ``SANDBOX_UID`` is one of the
  subordinate uids; the namespace's root builds the sandbox and ``setpriv`` drops to
  ``SANDBOX_UID`` without any capability, so the kernel again checks files against a uid that owns
  nothing: the instructor's files appear owned by the namespace's root and a 0600 file of theirs
  inside a shown folder (the venv, the Python installation, ``common/``) cannot be read. Without
  ``uidmap`` or a range (or where the probe of that set-up fails: the shown folders must then be
  readable by others) the judge runs as before, in bubblewrap's user namespace as
  ``SANDBOX_UID`` but checked against the instructor's uid: the allow-list is then the only
  protection, and the ``sandbox:`` line and ``grades.json`` (``sandbox_note``, ``judge_uid``) say
  so. The one-time set-up is in ``docs/instructors.md``.
- *Limits per exercise* (``cgroups``, ``inside/space.py``). Where the machine gives cgroups (v2
  where the grader's cgroup can hand ``memory`` and ``pids`` to children; else v1's ``memory`` and
  ``pids`` hierarchies, as root), each exercise's checker is put into cgroups of the exercise's own
  before it forks anything, so the checker, the answer process and every process they start
  share one ``--memory-mb`` (files in ``/dev/shm`` and in the working copy are memory too) and one
  ``--processes``; the cgroups' counters name a hit, whatever is left in them is killed, and they
  are removed. The working copy is a tmpfs of ``--file-mb`` plus room for the setup cells' files
  (``judges.SETUP_MB``): before each exercise the judge reserves all but ``--file-mb`` of what is
  free on it, so the exercise's files together (HOME and ``/tmp`` included) take at most
  ``--file-mb``; ``/dev/shm`` holds ``--memory-mb`` and is emptied after
  each exercise. Per process there are limits on memory (``RLIMIT_AS``: one huge allocation fails
  at once), CPU time, open files and file size, and per exercise a wall-clock limit. A hit scores
  that exercise zero, named ("the memory limit of 200 MiB for the exercise was reached", "the disk
  limit of 32 MiB ...", "the process limit of 16 ..."); the next exercise starts afresh. Without
  cgroups (an ordinary user on cgroup v1, or a v2 cgroup that hands nothing down) memory is
  bounded per process only (all of them together by ``--processes`` times ``--memory-mb``), the
  process count by ``RLIMIT_NPROC`` of the sandbox's uid (named when the answer lets the error
  through), and the files and ``/dev/shm`` by the tmpfs sizes as above.
- *Without the sandbox* (``--sandbox none``, or ``auto`` where bubblewrap does not work)
  grading runs only with ``--trusted``: the input must be trusted, because nothing keeps an
  answer from the network, the instructor's files or other students' feedback. It still
  refuses links, keeps the report in memory until every submission's processes are dead
  (the judge is a child subreaper; as root it runs in a PID namespace of its own or under a
  uid of its own whose processes are all killed), survives a killed judge, and hashes the
  repository (new files included) after every exercise: a change zeroes that exercise, is
  undone, and is recorded as kind ``files``. The exercise's cgroups still bound memory and
  processes where the machine gives them (an answer running as root could leave them: one more
  reason this mode is for trusted input only); files are bounded per file only (the working
  copy is on the host's disk).

- *Answer files* (an exercise whose answer is a script: ``submission.read_answer_file``,
  ``inside/judge.place_files``). Only the paths the instructor source's answer cell names are read,
  from the submitted notebook's own folder, as a notebook is read: no link anywhere below that folder,
  a regular file, at most ``MAX_ANSWER_FILE`` bytes of UTF-8; a file as handed out is not run. The text
  travels in its exercise's request (with the scripts its check runs, the instructor's own), and the
  judge writes it into the working copy after listing what is there (so it is a file the exercise
  created, removed with the rest after it), refusing a path
  that leaves the working copy, passes a link or names a file already there. The script then runs
  where any answer runs, under the exercise's sandbox, uid and limits; no other submission or
  exercise sees it, and it never holds a check (the checker runs it as a child process, and the checker
  is not dumpable).
- *The host side cannot be taken down.* An answer cell over 100,000 characters is refused
  unparsed, and one nested too deeply is a syntax error of its exercise; only regular files
  are read (opened without blocking: a FIFO is refused); every string from a submission is
  written and printed through ``text.shown`` (no lone surrogate, control character or ANSI
  escape reaches a file or the terminal raw); ``grades.csv``, ``grades.json`` and feedback
  notebooks are written to a temporary file and renamed, so a failure keeps the old report.

Layout
------
Host side: ``config`` (what to grade, the report's rows), ``classroom`` (submissions, scores,
the command line), ``report`` (``grades.csv``, ``grades.json``, feedback), ``text`` (strings
from a submission, made safe), ``judges`` (starting judges and speaking to them), ``sandbox``
(bubblewrap's allow-list, setpriv, the file guard), ``uids`` (each judge's uid: fresh as root,
subordinate for an ordinary user), ``cgroups`` (an exercise's cgroups), ``learner`` (a learner's
own notebook, ``--self``).
Inside the sandbox: ``inside/``. The student runtime (``course.student``) is what the
exercise notebooks import.
"""
