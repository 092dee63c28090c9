"""What makes the system tests cheaper to run, kept out of the learner's package.

The notebooks under ``make test`` run the learner's path: a fresh ``torchrun`` agent and fresh
workers for every launch. Some system tests launch many short jobs whose subject is not the
launch itself; they may fork their workers from an agent that imported the workers' libraries
first (``tests.speedups.agent``), which costs a third of the CPU seconds of a tiny launch.
Nothing in ``common/`` or ``chapters/`` imports this package (tests/unit/test_notebook_parameters.py).
"""
