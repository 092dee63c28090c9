"""The system tier (`make test` only): tests that start processes — torchrun jobs, DataLoader workers,
notebook kernels, the grader's judges, command lines run for real, a browser. See CONTRIBUTING.md."""
