"""``python -m course.grading``: grade submitted exercise notebooks (see ``classroom.main``), or, with
``--self PATH``, a learner's own notebook where it is (``learner.main``)."""

import sys

if __name__ == "__main__":
    sys.argv[0] = "python -m course.grading"  # the usage line's name (Python 3.11 would say __main__.py)
    if any(arg == "--self" or arg.startswith("--self=") for arg in sys.argv[1:]):
        from course.grading.learner import main
    else:
        from course.grading.classroom import main
    raise SystemExit(main())
