# Empty dependencies file for test_pgoutput.
# This may be replaced when dependencies are built.
