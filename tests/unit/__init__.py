"""Tests of one module in process, without a stack: a module's tests are found
by its name (`test_<module>.py`)."""
