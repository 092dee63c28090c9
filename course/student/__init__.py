"""The student runtime: what the exercise notebooks import at run time (``from course.student.checks
import checks, hints``), in the learner's kernel, under nbgrader and inside the grader's sandbox.

``checks`` (the visible checks, "not yet done", the stepped hints) and ``messages`` (their
messages in the notebook's language, from ``messages_<language>.json``). Standard library only,
and nothing of the instructor tooling (``course.assignments``, ``course.grading``,
``course.publishing``): the sandbox shows student code this package, not those
(``tests/unit/test_layout.py`` checks both).
"""
