# Empty compiler generated dependencies file for test_backoff.
# This may be replaced when dependencies are built.
