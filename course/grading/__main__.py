"""``python -m course.grading``: grade submitted exercise notebooks (see ``grader.main``), or, with
``--self PATH``, a learner's own notebook where it is (``self_grade.main``)."""

import sys

if __name__ == "__main__":
    sys.argv[0] = "python -m course.grading"  # the usage line's name (Python 3.11 would say __main__.py)
    if any(arg == "--self" or arg.startswith("--self=") for arg in sys.argv[1:]):
        from course.grading.self_grade import main
    else:
        from course.grading.grader import main
    raise SystemExit(main())
